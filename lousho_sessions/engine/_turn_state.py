"""``TurnState``: everything about an unfinished turn. Its checkpoint is this, as JSON.

The checkpoint codec is in ``serde`` (``turn_checkpoint``/``turn_state_from_checkpoint``),
with every other format. The saved format is versioned by ``CHECKPOINT_VERSION``:
1 — first release; 2 — ``attempts`` (sweeps that claimed the turn), ``started`` (calls
of the current step to non-idempotent tools that began: the effect ledger's intents),
``fence`` (the lease that saved it) and the status ``"abandoned"``; 3 — messages may
hold reasoning parts (``"type": "reasoning"``) and tool calls their place among the parts
(``after_parts``); a version 2 checkpoint reads as it is. Optional fields
added without a new version (a release that does not know a field keeps it in
``extra`` and writes it back; one that does reads a checkpoint without it as before):
``trace`` — the W3C trace context of the run that started the turn and its attempt
count (``_telemetry``), written only when the agent traces. Inside ``decisions``, a
decision's ``arguments``: an approver's edited arguments (``_edits``); the edited call
is also in ``new`` (saved before it runs), which a release that does not know them reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import attrs

from .._random import uuid4_hex
from ..messages import NO_USAGE, Message, Usage

__all__ = ["CHECKPOINT_FORMAT", "CHECKPOINT_VERSION", "TurnState"]

#: Checkpoint format versions: 1 — first release; 2 — attempts, started, fence, "abandoned";
#: 3 — messages may hold reasoning parts, tool calls their place (``after_parts``).
CHECKPOINT_VERSION = 3
CHECKPOINT_FORMAT = "lousho.turn"


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


@attrs.define
class TurnState:
    """Everything about an unfinished turn; the checkpoint is this, as JSON.

    ``history`` (the transcript before the turn) is not in the checkpoint: the
    session store holds it. A session's turn gets the session's own list, not a copy
    (``copy_history=False``: 50,000 messages are not copied for each turn); that list
    changes only when the turn is committed, after which ``history`` is not read again.
    ``extra`` holds checkpoint fields a newer release wrote.
    """

    run_id: str
    session_id: str | None
    turn_id: str | None
    new: list[Message]
    history: Sequence[Message] = attrs.field(default=(), kw_only=True)
    base_length: int = 0
    base_last_id: str | None = None
    status: str = "running"
    approval_id: str | None = None
    results: dict[str, Message] = attrs.field(factory=dict)
    decisions: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    steps: int = 0
    tool_calls: int = 0
    usage: Usage = NO_USAGE
    queued: list[dict[str, Any]] = attrs.field(factory=list)
    created_at: str = attrs.field(factory=now_iso)
    #: how many times a sweep claimed this turn (``lousho_sessions.recovery``)
    attempts: int = 0
    #: calls of the current step to non-idempotent tools that began (their intent)
    started: list[str] = attrs.field(factory=list)
    #: the fence of the lease that saved this checkpoint (``None``: no lease)
    fence: int | None = None
    extra: dict[str, Any] = attrs.field(factory=dict)
    #: result records saved beside the checkpoint and not deleted yet (see _checkpoints)
    records: list[str] = attrs.field(factory=list, init=False, eq=False, repr=False)
    #: message dicts by message identity, kept by serde: a message is converted once,
    #: not at every save, so a checkpoint's cost does not grow with the turn's length
    message_dicts: dict[int, tuple[Message, dict[str, Any]]] = attrs.field(
        factory=dict, init=False, eq=False, repr=False
    )

    def snapshot(self) -> TurnState:
        """The state as it is now, to be saved later: its own lists and dicts (the messages
        in them shared: they are frozen), its records and the message dicts converted so far."""
        copy = TurnState(  # by position (``attrs.evolve`` looks every field up by name)
            self.run_id,
            self.session_id,
            self.turn_id,
            list(self.new),
            self.base_length,
            self.base_last_id,
            self.status,
            self.approval_id,
            dict(self.results),
            dict(self.decisions),
            self.steps,
            self.tool_calls,
            self.usage,
            list(self.queued),
            self.created_at,
            self.attempts,
            list(self.started),
            self.fence,
            dict(self.extra),
            history=self.history,
        )
        copy.records = list(self.records)
        copy.message_dicts = self.message_dicts
        return copy

    @classmethod
    def start(
        cls,
        input_messages: Sequence[Message],
        *,
        history: Sequence[Message] = (),
        session_id: str | None = None,
        turn_id: str | None = None,
        run_id: str | None = None,
        copy_history: bool = True,
    ) -> TurnState:
        if copy_history:
            history = tuple(history)
        return cls(
            run_id=run_id or "run-" + uuid4_hex(),
            session_id=session_id,
            turn_id=turn_id,
            history=history,
            new=list(input_messages),
            base_length=len(history),
            base_last_id=history[-1].id if history else None,
        )
