"""Where a turn's checkpoints go: its state under the turn id, tool results beside it.

The state is saved whole after the input is taken, after each model response that
asks for tools, at a pause and when queued input joins; a final answer is not
saved: the commit that appends the turn to the transcript records it. A tool
result is saved as it finishes, in a small *result record* ``<turn id>-r<step>-<k>`` that holds at most ``RESULTS_PER_RECORD``
results of one step: recording a result costs the same however many calls came
before it in the step (saving the whole state for each would cost O(n) per call,
O(n²) per step). Loading a turn merges the records of its current step back in;
the next whole save holds their results, so it deletes the records (in its own
transaction where the store can: ``save_and_delete``).

The effect ledger: before calls to tools declared ``idempotent=False`` run, their ids
are written to the step's current result record (``started``: one small write for the
calls that start together), so a resumed turn knows which calls may have run
(``_effects``). Calls to idempotent tools cost no such write.

The last result of a step is *owed* instead (``save_result(defer=True)``): nothing
with an effect comes between it and the next model call, so the turn writes it once
that call's request has left (``ModelRequest.on_sent``), while the model works, and
not on the way to it; ``flush()`` writes it, and every other write holds it already
(the next write to the record, or the whole save that deletes the records). The
state saved when the input is taken is owed the same way (``save(defer=True)``: the
state as it was then), unless the store saved it with the lease. So is the state saved
after a model response whose calls are all to ``read_only`` tools: nothing they do needs
it first, and each result joins the owed state (it is taken again) rather than a record,
so the step costs one write, in the next call's wait. The turn flushes before anything
else that has an effect (an approval created, an intent recorded: ``_write_record``
writes the owed state first) and whenever it ends.

Every write carries the fence of the session's lease (``fence``, ``None`` outside a
lease): a turn whose lease was lost gets ``LeaseLostError`` and writes nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from .._kept_json import EncodedObject
from ..abort import AbortController
from ..errors import StoreCorruptError
from ..messages import Message
from ..serde import message_from_dict, remember_valid, to_json
from ..stores.adapters import adapt_checkpoints
from ..stores.base import BaseCheckpointStore, CheckpointStore
from ..stores.memory import MemoryCheckpointStore
from ._checkpoint_codec import (
    splice_object,
    turn_checkpoint,
    turn_message_dict,
    turn_message_texts,
)
from ._turn_state import TurnState

__all__ = ["RESULTS_PER_RECORD", "OwedWrite", "TurnCheckpoints"]

log = logging.getLogger("lousho_sessions.turn")

#: Tool results per result record: bounds the bytes written per recorded result.
RESULTS_PER_RECORD = 32
RECORD_FORMAT = "lousho.turn-results"


class TurnCheckpoints:
    """Saves one turn's checkpoints in ``store``.

    Not durable: only a turn paused on an approval is saved (so ``resolve()`` can go
    on), and tool results are not. Durable: every checkpoint and every tool result.
    ``fence`` is the session lease's, carried by every write (``None``: no lease).
    """

    def __init__(
        self,
        store: CheckpointStore,
        *,
        durable: bool,
        fence: int | None = None,
        input_saved: bool = False,
    ) -> None:
        self.store: BaseCheckpointStore = adapt_checkpoints(store)
        self.durable = durable
        self.fence = fence
        #: the store saved the new turn's first checkpoint (its input taken) with the lease:
        #: the turn does not save it again
        self.input_saved = input_saved
        self._record_key: str | None = None
        #: the results the current record holds, by call id (an owed one has left
        #: ``state.results`` when it is written: the step ended)
        self._results: dict[str, Message] = {}
        self._started: list[str] = []
        self._counter = 0
        self._record_step = 0  # the step whose results the current record holds
        #: the state whose current result record holds a result not written yet (``flush``)
        self._owed: TurnState | None = None
        #: a whole state not saved yet (``save(defer=True)``): the state as it was (its
        #: ``snapshot``, with the records its save deletes)
        self._owed_whole: TurnState | None = None
        checks_json = self.store.checks_json
        #: build what it saves from the messages' kept texts, for the commit to use again
        #: (not in memory: the memory session store keeps the messages, encoding none of
        #: those a checkpoint held, and the memory checkpoint store encodes a dict in one go)
        self._splice = checks_json and not isinstance(self.store, MemoryCheckpointStore)
        #: the store encodes a dict it saves: note its messages as known to encode (those
        #: spliced in are, their texts kept)
        self._note_valid = checks_json and not self._splice

    def save(self, state: TurnState, *, defer: bool = False) -> None:
        """Save the whole state (when durable, or paused), then drop the records it now holds;
        ``defer``: the state as it is now, saved by ``flush`` (a turn's input, once the first
        request has left)."""
        if not (self.durable or state.status == "awaiting-approval"):
            return
        state.fence = self.fence
        self._owed_whole = None  # this state is newer
        if defer:  # encoded when written, off the way to the next call
            self._owed_whole = state.snapshot()
        else:
            self._save_whole(state)
        self._record_key, self._results, self._started = None, {}, []
        self._owed = None  # the whole state holds its results
        state.records.clear()

    def _save_whole(self, state: TurnState) -> None:
        """Save ``state`` (as it was, for an owed one) and delete the records it holds."""
        checkpoint = turn_checkpoint(state, encoded=self._splice)
        records = list(state.records)
        self.store.save_and_delete(state.turn_id or "", checkpoint, records, fence=self.fence)
        if self._note_valid:
            remember_valid([*state.new, *state.results.values()])

    def keep(self, state: TurnState) -> None:
        """Save the whole state even when not durable (an aborted turn that stays pending:
        without a checkpoint store, a resumed approved turn, in memory)."""
        durable, self.durable = self.durable, True
        try:
            self.save(state)
        finally:
            self.durable = durable

    def save_result(self, state: TurnState, call_id: str, *, defer: bool = False) -> None:
        """Save the recorded result of ``call_id`` in the step's current result record;
        ``defer``: only note it, for ``flush`` (or the next write) to save."""
        if not self.durable:
            return
        if self._owed_whole is not None:  # a step of read-only calls: the result joins it
            self.save(state, defer=True)
            return
        self._next_record(state)
        self._results[call_id] = state.results[call_id]
        if defer:
            self._owed = state
            return
        self._write_record(state)
        if self._note_valid:
            remember_valid((state.results[call_id],))

    @property
    def owed(self) -> bool:
        """A state or a result is recorded and not written yet (``flush`` writes it)."""
        return self._owed is not None or self._owed_whole is not None

    def flush(self, *, quietly: bool = False) -> None:
        """Write what is owed: the whole state, the result record holding an owed result;
        nothing when none is owed. Once called, nothing is owed, whether the write succeeds
        or not. ``quietly``: on the way out with another error, a failure is logged, not
        raised."""
        whole, state = self._owed_whole, self._owed
        self._owed_whole = self._owed = None
        try:
            if whole is not None:
                self._save_whole(whole)
            if state is not None:
                self._write_record(state)
        except Exception:
            if not quietly:
                raise
            log.warning("turn %s: what it owed its checkpoint could not be saved",
                        whole.turn_id if whole is not None else self._record_key,
                        exc_info=True)  # fmt: skip
            return
        if state is not None and self._note_valid:
            remember_valid(self._results.values())

    def owed_write(self, provider: object, controller: AbortController) -> OwedWrite | None:
        """Before a model call: ``None`` when nothing is owed, or written now (a provider
        that does not report its request sent); else the call's ``on_sent``."""
        if not self.owed:
            return None
        if getattr(provider, "reports_sent", False):  # a Provider need not say
            return OwedWrite(self, controller)
        self.flush()
        return None

    def save_started(self, state: TurnState, call_ids: list[str]) -> None:
        """Record that the calls ``call_ids`` begin (their intent), before they run."""
        if not self.durable:
            return
        self._next_record(state)
        self._started.extend(call_ids)
        self._write_record(state)

    def _next_record(self, state: TurnState) -> None:
        if self._record_key is None or len(self._results) >= RESULTS_PER_RECORD:
            self._counter += 1
            self._record_step = state.steps  # an owed record is written in the next step
            self._record_key = f"{state.turn_id}-r{state.steps}-{self._counter}"
            self._results, self._started = {}, []
            state.records.append(self._record_key)

    def _write_record(self, state: TurnState) -> None:
        assert self._record_key is not None
        if self._owed_whole is not None:  # the state the record adds to, first
            whole, self._owed_whole = self._owed_whole, None
            self._save_whole(whole)
        self._owed = None  # the record written holds every result recorded
        record = {"format": RECORD_FORMAT, "version": 1, "run_id": state.run_id,
                  "step": self._record_step}  # fmt: skip
        rest = {**({"started": self._started} if self._started else {}), **tool_state(state)}
        text = self._record_text(state, record, rest) if self._splice else None
        record["results"] = {k: turn_message_dict(state, m) for k, m in self._results.items()}
        record.update(rest)
        self.store.save(
            self._record_key,
            record if text is None else EncodedObject(record, text),
            fence=self.fence,
        )

    def _record_text(
        self, state: TurnState, record: dict[str, Any], rest: dict[str, Any]
    ) -> str | None:
        """The result record's text, the results' kept texts spliced in; ``None``: encode it."""
        texts = turn_message_texts(state, self._results.values())
        if texts is None:
            return None
        results = splice_object(zip(self._results, texts, strict=True))
        if results is None:
            return None
        what = f"checkpoint {self._record_key!r}"
        head = to_json(record, what=what)[:-1]
        tail = to_json(rest, what=what)[1:] if rest else "}"
        return f'{head},"results":{results}{"," if rest else ""}{tail}'

    def merge_records(self, state: TurnState) -> None:
        """Add the results saved in records of ``state``'s current step (after a crash)."""
        if not self.durable:
            return
        newest = -1  # the ToolContext.state of the newest record of the step is the turn's
        for key in self.store.list(f"{state.turn_id}-r"):
            data = self.store.load(key)
            if data is None:
                continue
            state.records.append(key)
            if data.get("format") != RECORD_FORMAT:
                raise StoreCorruptError(f"checkpoint {key!r}: not a lousho result record")
            if data.get("run_id") != state.run_id or data.get("step") != state.steps:
                continue  # left over from an earlier step: its results are in the state
            try:
                for call_id, message in dict(data["results"]).items():
                    state.results.setdefault(str(call_id), message_from_dict(message))
                # each start counts (a record holds only those since the last whole save):
                # a call approved to run again that is interrupted again is asked about again
                state.started.extend(str(c) for c in data.get("started", ()))
                number = key.rpartition("-")[2]
                newer = number.isdigit() and int(number) > newest
                if newer and isinstance(data.get("state"), dict):
                    newest = int(number)
                    state.extra["state"] = dict(data["state"])
                    state.extra["state_read"] = data.get("state_read")
            except (KeyError, TypeError, ValueError) as exc:
                raise StoreCorruptError(f"checkpoint {key!r}: cannot read results: {exc}") from exc
        numbers = [k.rpartition("-")[2] for k in state.records]
        self._counter = max([int(n) for n in numbers if n.isdigit()] + [self._counter])

    def keys(self, state: TurnState) -> list[str]:
        """What ``state`` keeps in the store: its result records and its checkpoint."""
        return [*state.records, state.turn_id or ""]

    def forget(self, state: TurnState) -> None:
        """Delete the turn's checkpoint and its result records."""
        self._owed = self._owed_whole = None
        for key in self.keys(state):
            self.store.delete(key, fence=self.fence)
        state.records.clear()


class OwedWrite:
    """A model call's ``on_sent``: writes the owed result once the request has left. A
    failure stops the call (``controller``) and is kept in ``failed`` for the turn to
    raise: raised into the provider, it would be taken for the provider's own."""

    __slots__ = ("checkpoints", "controller", "failed")

    def __init__(self, checkpoints: TurnCheckpoints, controller: AbortController) -> None:
        self.checkpoints = checkpoints
        self.controller = controller
        self.failed: BaseException | None = None

    def __call__(self) -> None:
        try:
            self.checkpoints.flush()
        except BaseException as exc:
            self.failed = exc
            self.controller.abort("the turn's checkpoint could not be saved")

    def settle(self) -> None:
        """After the call: raise why the write failed; write it if it was never called (the
        request never left, or a provider did not call it)."""
        if self.failed is not None:
            raise self.failed
        self.checkpoints.flush()


def tool_state(state: TurnState) -> dict[str, Any]:
    """The fields a result record adds for the turn's ``ToolContext.state`` (its tools may have
    changed it; the next whole save holds it too): none when no tool read it."""
    held = state.extra.get("state")
    if not isinstance(held, dict):
        return {}
    return {"state": held, "state_read": state.extra.get("state_read")}
