"""Recovery: finish the durable turns whose process died, exactly once.

A durable turn (a session turn ``<id>.turn-<n>`` or a single send ``<id>.send``) runs
holding its session's lease and checkpoints as it goes. When its process dies, the
checkpoint stays and nobody finishes it unless someone calls ``resume()``; ``sweep``
is that someone::

    from lousho_sessions.recovery import sweep
    for swept in sweep(store, agent=agent):   # e.g. every 30 s, from a task queue
        print(swept.turn_id, swept.outcome)

A turn is **stale** when its checkpoint is pending and no live process holds its
session: on SQLite and files its OS turn lock is free (a dead process holds none),
on PostgreSQL and Redis its lease expired (heartbeats stopped). A turn that merely
runs long still holds its lease and is never stale. A turn waiting on a pending
approval is never swept: a human decides it. Once the approval is decided (its
resolver died while the turn went on, or ``lousho approvals resolve`` decided it
without continuing it), the turn is an ordinary stale turn when nobody holds its
session: a sweep finishes it, applying the decision once.

Claiming takes the turn lock without waiting, which hands out a new fence: of two
sweepers, or a sweeper and an old worker woken from a pause, only the holder of the
newest fence can write; the loser gets ``outcome == "taken"`` (or ``LeaseLostError``
on its next write), and a sweep goes on to claim the next stale turn instead, so
sweepers running at once share the work. Each claim raises the checkpoint's ``attempts``; a turn claimed
``max_attempts`` times is marked ``"abandoned"``, kept and listed by
``abandoned_turns``, never deleted (``resume()`` or ``send()`` of its session tries it
again; ``discard_pending()`` drops it).

``agent`` supplies the model and tools that finish the turn: SPEC 13 names
``sweep(store, *, limit, older_than)``, and resuming needs both, so ``agent=`` is a
required keyword. Its store must be ``store`` (or hold the same checkpoint store).
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from datetime import datetime, timedelta, timezone
from typing import Any

import attrs

from ._recover import Recovered, recover_send, recover_session_turn
from .agent import Agent
from .errors import StoreError
from .results import ExecutionResult
from .stores.adapters import adapt_approvals, adapt_checkpoints, adapt_sessions, store_parts
from .stores.base import AgentStore, older_than_seconds, validate_turn_id
from .stores.lease import Lease, fence_session_id

__all__ = ["StaleTurn", "SweptTurn", "abandoned_turns", "resume_turn", "stale_turns", "sweep"]

log = logging.getLogger("lousho_sessions.recovery")

#: The fields of a pending checkpoint a listing reads (not its messages).
_FIELDS = ("status", "updated_at", "attempts", "fence", "approval_id")
#: The statuses of an approval record that decided it.
DECIDED = ("approved", "denied")


@attrs.frozen
class StaleTurn:
    """A durable turn nobody is finishing: ``status`` ``"running"`` (stale) or ``"abandoned"``.

    ``attempts`` counts the sweeps that claimed it; ``fence`` is the fence of the lease
    that saved its checkpoint last (give it to ``resume_turn`` from a queued message).
    """

    turn_id: str
    session_id: str
    status: str
    attempts: int
    updated_at: datetime | None
    fence: int | None


@attrs.frozen
class SweptTurn:
    """What claiming one stale turn came to.

    ``outcome``: ``"finished"`` (its result is ``result``), ``"parked"`` (it waits on an
    approval now, e.g. a call that may have run), ``"abandoned"`` (claimed
    ``max_attempts`` times), ``"taken"`` (someone else holds or finished it) or
    ``"failed"`` (it raised ``error``; kept, and tried again by the next sweep).
    """

    turn_id: str
    session_id: str
    outcome: str
    attempts: int
    result: ExecutionResult | None = None
    error: BaseException | None = attrs.field(default=None, eq=False)


def stale_turns(
    store: Any, *, limit: int = 100, older_than: timedelta | float | None = None
) -> list[StaleTurn]:
    """The durable turns whose holder is gone, oldest first; reads only, claims nothing.

    ``older_than`` (seconds or a ``timedelta``) keeps only those whose checkpoint was
    not saved for that long. A checkpoint saved outside a lease (``AgentExecutor``, a
    release before checkpoint version 2) is never listed: nothing tells whether its
    turn still runs; ``resume()`` it yourself. A store that cannot tell whether a turn is held
    (``turn_held`` returns ``None``: a plain user store) lists its pending turns;
    claiming them still refuses a held one.
    """
    return _listed(store_parts(store), ("running",), limit, older_than)


def abandoned_turns(store: Any, *, limit: int = 100) -> list[StaleTurn]:
    """The turns a sweep gave up on after ``max_attempts`` claims, oldest first (kept, never deleted)."""
    return _listed(store_parts(store), ("abandoned",), limit, None)


def sweep(
    store: Any,
    *,
    agent: Agent,
    limit: int = 100,
    older_than: timedelta | float | None = None,
    max_attempts: int = 3,
) -> list[SweptTurn]:
    """Claim and finish up to ``limit`` stale turns with ``agent``'s model and tools.

    The stale turns are claimed oldest first, ``limit`` at a time (``claim_stale`` of the
    store: one statement on PostgreSQL); those another sweeper claimed first are passed
    over and the next ones claimed, until ``limit`` are claimed or none is left, so
    sweepers running at once share the work. The claimed turns run at the same time,
    each on its session's lane of the agent's workers; returns when all have ended, one
    ``SweptTurn`` each, oldest first, with a ``"taken"`` one for each turn another
    sweeper claimed first (so the list may be longer than ``limit``). Run it from many processes at
    once: each turn is resumed once. One turn per session is swept at a time.
    """
    _check_attempts(max_attempts)
    _parts_of(store, agent)
    found: dict[str, StaleTurn] = {}
    for stale in _listed(store_parts(store), ("running",), None, older_than):
        found.setdefault(stale.session_id, stale)
    return _run_claimed(agent, list(found.values()), max_attempts, by_fence=True, limit=limit)


def resume_turn(
    store: Any,
    turn_id: str,
    *,
    agent: Agent,
    fence: int | None = None,
    max_attempts: int = 3,
) -> SweptTurn:
    """Claim and finish the stale turn ``turn_id`` (from ``stale_turns``, or a queued message).

    With ``fence`` (``StaleTurn.fence``, sent with the message): ``"taken"`` if the
    turn's checkpoint was saved under another lease since, so a message delivered
    twice, or late, resumes nothing twice. A held turn is ``"taken"`` too.
    """
    validate_turn_id(turn_id)
    _check_attempts(max_attempts)
    _parts_of(store, agent)
    turn = StaleTurn(turn_id, fence_session_id(turn_id), "running", 0, None, fence)
    [swept] = _run_claimed(agent, [turn], max_attempts, by_fence=fence is not None)
    return swept


def _run_claimed(
    agent: Agent,
    turns: list[StaleTurn],
    max_attempts: int,
    *,
    by_fence: bool,
    limit: int | None = None,
) -> list[SweptTurn]:
    """Claim the sessions of ``turns`` (one turn each), in order, in chunks, until ``limit``
    are claimed (``None``: try them all at once), and finish those claimed."""
    sessions = agent.config.store.sessions
    assert sessions is not None  # an agent always has a session store
    claimer = adapt_sessions(sessions)
    wanted = len(turns) if limit is None else max(limit, 0)
    tried: list[tuple[StaleTurn, Future[Recovered] | None]] = []
    claimed = at = 0
    while claimed < wanted and at < len(turns):
        chunk = turns[at : at + wanted - claimed]
        at += len(chunk)
        leases = claimer.claim_stale([t.session_id for t in chunk])
        try:
            for turn in chunk:
                lease = leases.pop(turn.session_id, None)
                fence = turn.fence if by_fence else None
                # no lease: another sweeper, or a live turn, holds it ("taken")
                tried.append(
                    (
                        turn,
                        None if lease is None else _submit(agent, turn, lease, fence, max_attempts),
                    )
                )
                claimed += lease is not None
        finally:
            for lease in leases.values():  # not submitted: let go at once
                lease.release()
    return [
        SweptTurn(t.turn_id, t.session_id, "taken", t.attempts)
        if future is None
        else _swept(t.turn_id, future)
        for t, future in tried
    ]


def _check_attempts(max_attempts: int) -> None:
    if not isinstance(max_attempts, int) or max_attempts < 1:
        raise ValueError(f"max_attempts must be an int >= 1, got {max_attempts!r}")


def _parts_of(store: Any, agent: Agent) -> AgentStore:
    parts = store_parts(store)
    if parts.checkpoints is None or agent.config.store.checkpoints is None:
        raise StoreError(
            f"recovery: the store given ({parts.checkpoints!r}) and the agent's "
            f"({agent.config.store.checkpoints!r}) must both keep checkpoints: make the "
            "agent with create_agent(store=store), so the turns it finishes are the ones found"
        )
    return parts


def _submit(
    agent: Agent, turn: StaleTurn, lease: Lease, fence: int | None, max_attempts: int
) -> Future[Recovered]:
    key, _, tail = turn.turn_id.partition(".")
    if tail == "send":
        return recover_send(agent._singles, key, lease, max_attempts=max_attempts, fence=fence)
    core = agent._core_for(key)  # the live session's, so its transcript sees the turn
    return recover_session_turn(core, turn.turn_id, lease, max_attempts=max_attempts, fence=fence)


def _swept(turn_id: str, future: Future[Recovered]) -> SweptTurn:
    done = future.result()
    return SweptTurn(
        turn_id, fence_session_id(turn_id), done.outcome, done.attempts, done.result, done.error
    )


def _listed(
    parts: AgentStore,
    statuses: tuple[str, ...],
    limit: int | None,
    older_than: timedelta | float | None,
) -> list[StaleTurn]:
    """The pending turns of ``statuses``, oldest first, at most ``limit`` (``None``: all);
    a ``"running"`` one only when no live turn holds its session (asked of all at once).

    A turn ``"awaiting-approval"`` whose approval is decided counts as ``"running"``: its
    decision is waiting to be applied (one approval read for each such turn)."""
    if parts.checkpoints is None:
        return []
    checkpoints = adapt_checkpoints(parts.checkpoints)
    sessions = None if parts.sessions is None else adapt_sessions(parts.sessions)
    approvals = None if parts.approvals is None else adapt_approvals(parts.approvals)
    cutoff = None
    if older_than is not None:
        cutoff = datetime.now(timezone.utc) - timedelta(seconds=older_than_seconds(older_than))
    found: list[StaleTurn] = []
    for turn_id, data in checkpoints.pending_fields(_FIELDS):
        status = data.get("status", "running")
        if (
            status == "awaiting-approval"
            and "running" in statuses
            and approvals is not None
            and decided(approvals, data.get("approval_id"))
        ):
            status = "running"  # decided, not yet applied: whoever claims it applies it
        if status not in statuses:
            continue
        updated_at = _time(data.get("updated_at"))
        if cutoff is not None and (updated_at is None or updated_at > cutoff):
            continue
        session_id = fence_session_id(turn_id)
        attempts, fence = data.get("attempts", 0), data.get("fence")
        if status == "running" and not isinstance(fence, int):
            continue  # saved outside a lease (AgentExecutor, an older release): cannot tell
        found.append(
            StaleTurn(
                turn_id,
                session_id,
                str(status),
                attempts if isinstance(attempts, int) else 0,
                updated_at,
                fence if isinstance(fence, int) else None,
            )
        )
    running = [t.session_id for t in found if t.status == "running"]
    held = None if sessions is None or not running else sessions.held_sessions(running)
    if held:  # a live turn holds these: running, perhaps long, not stale
        found = [t for t in found if t.status != "running" or t.session_id not in held]
    found.sort(key=lambda t: (t.updated_at or datetime.min.replace(tzinfo=timezone.utc), t.turn_id))
    return found if limit is None else found[: max(limit, 0)]


def decided(approvals: Any, approval_id: object) -> bool:
    """Whether the approval ``approval_id`` is decided (approved or denied); an unreadable
    or missing record is not."""
    if not isinstance(approval_id, str):
        return False
    try:
        record = approvals.get(approval_id)
    except StoreError as exc:  # one bad record never blocks the others
        log.warning("skipping approval %s: %s", approval_id, exc)
        return False
    return record is not None and record.get("status") in DECIDED


def _time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)
