"""The sweeper loop for deployments without a task queue, and how a worker finds its agent.

``run_sweeper(store, agent=..., every=30)`` calls ``recovery.sweep`` every ``every``
seconds until stopped (a ``threading.Event``, SIGTERM or SIGINT) and returns what it
did; ``python -m lousho_sessions sweep --every 30`` runs it. ``load_object`` and
``resolve_agent``/``resolve_store`` turn the ``"package.module:attr"`` paths a
command line or a Celery config names into the objects a worker process uses, so
every process opens its own store (a connection pool does not survive ``fork``).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from types import FrameType
from typing import Any

import attrs

from ..agent import Agent
from ..errors import LoushoError
from ..recovery import SweptTurn, sweep

__all__ = [
    "SweeperTotals",
    "load_object",
    "resolve_agent",
    "resolve_store",
    "run_sweeper",
]

log = logging.getLogger("lousho_sessions.sweeper")

#: What names an agent or a store: the object, an import path, or a factory of no arguments.
AgentSpec = Agent | str | Callable[[], Agent]
StoreSpec = Any


def load_object(path: str) -> Any:
    """The object ``"package.module:attr"`` names (``attr`` may be dotted: ``"mod:obj.part"``).

    Raises ``LoushoError`` naming the path and what was missing; the import error
    of the module itself is its cause, so a typo and a broken module read differently.
    """
    if not isinstance(path, str) or path.count(":") != 1:
        raise LoushoError(f"expected an import path 'package.module:attr', got {path!r}")
    module_name, _, attr = path.partition(":")
    if not module_name or not attr or not all(p.isidentifier() for p in attr.split(".")):
        raise LoushoError(f"expected an import path 'package.module:attr', got {path!r}")
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise LoushoError(f"{path!r}: cannot import module {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError as exc:
            raise LoushoError(
                f"{path!r}: {type(found).__name__} {module_name!r} has no attribute {part!r}"
            ) from exc
    return found


def resolve_agent(spec: AgentSpec) -> Agent:
    """The ``Agent`` ``spec`` names: an agent, an import path of one, or a factory (called once)."""
    found: Any = load_object(spec) if isinstance(spec, str) else spec
    if not isinstance(found, Agent) and callable(found):
        found = found()
    if not isinstance(found, Agent):
        raise LoushoError(
            f"agent {spec!r}: expected an Agent (or a function returning one), "
            f"got {type(found).__name__}"
        )
    return found


def resolve_store(spec: StoreSpec, agent: Agent) -> Any:
    """The store ``spec`` names (as ``resolve_agent``), or the agent's own store for ``None``."""
    if spec is None:
        found: Any = agent.store
        if found is None or getattr(found, "checkpoints", None) is None:
            raise LoushoError(
                f"{agent!r} has no store with checkpoints: nothing durable to sweep; "
                "give the agent one (create_agent(store=...)) or name the store"
            )
        return found
    found = load_object(spec) if isinstance(spec, str) else spec
    if getattr(found, "checkpoints", None) is None and callable(found):
        found = found()
    if getattr(found, "checkpoints", None) is None:
        raise LoushoError(
            f"store {spec!r}: expected a store with checkpoints (an AgentStore such as "
            f"SqliteStore or PostgresStore, or a function returning one), got {type(found).__name__}"
        )
    return found


@attrs.frozen
class SweeperTotals:
    """What ``run_sweeper`` did: sweeps made, turns by ``SweptTurn.outcome``, sweeps that raised."""

    rounds: int = 0
    finished: int = 0
    parked: int = 0
    abandoned: int = 0
    taken: int = 0
    failed: int = 0  #: turns whose attempt raised (kept; the next sweep tries again)
    errors: int = 0  #: sweeps that raised (the store was unreachable, ...)

    @property
    def swept(self) -> int:
        """Turns the sweeps returned, whatever their outcome."""
        return self.finished + self.parked + self.abandoned + self.taken + self.failed

    def add(self, turns: list[SweptTurn]) -> SweeperTotals:
        counts = {name: getattr(self, name) for name in _OUTCOMES}
        for turn in turns:
            if turn.outcome in counts:
                counts[turn.outcome] += 1
        return attrs.evolve(self, rounds=self.rounds + 1, **counts)


_OUTCOMES = ("finished", "parked", "abandoned", "taken", "failed")


def _check_every(every: float) -> float:
    if isinstance(every, bool) or not isinstance(every, (int, float)):
        raise LoushoError(f"every must be seconds (a positive number), got {every!r}")
    if not (math.isfinite(every) and every > 0):
        raise LoushoError(f"every must be seconds (a positive number), got {every!r}")
    return float(every)


@contextlib.contextmanager
def _stopped_by_signals(stop: threading.Event) -> Iterator[None]:
    """On the main thread: SIGTERM/SIGINT set ``stop`` (a second one interrupts at once)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread; ``stop`` still works
        return
    previous: dict[signal.Signals, Any] = {}

    def handle(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt  # asked twice: do not wait for the sweep in progress
        log.info("signal %s: stopping after the sweep in progress", signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.signal(signum, handle)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_sweeper(
    store: Any,
    *,
    agent: Agent,
    every: float,
    limit: int = 100,
    older_than: timedelta | float | None = None,
    max_attempts: int = 3,
    stop: threading.Event | None = None,
    on_swept: Callable[[SweptTurn], None] | None = None,
    rounds: int | None = None,
) -> SweeperTotals:
    """Sweep ``store`` now and then every ``every`` seconds until stopped; the totals.

    Each round is ``recovery.sweep(store, agent=agent, limit=..., older_than=...,
    max_attempts=...)``; ``on_swept`` is called with each turn it returns. It stops
    when ``stop`` is set, after ``rounds`` sweeps if given, or — called on the main
    thread — on SIGTERM or SIGINT (the handlers are restored on return). A sweep in
    progress is finished first (a sweep that found ``limit`` turns is followed by
    the next one at once, without waiting), so no turn is left half-resumed by the loop itself;
    a second signal interrupts at once (``KeyboardInterrupt``), which is safe too:
    the interrupted turn's lease runs out and the next sweeper takes it. A sweep
    that raises (the database is down) is logged and counted, and the loop goes on.
    """
    every = _check_every(every)
    if rounds is not None and (
        isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1
    ):
        raise LoushoError(f"rounds must be a positive integer or None, got {rounds!r}")
    stop = threading.Event() if stop is None else stop
    totals = SweeperTotals()
    with _stopped_by_signals(stop):
        while not stop.is_set():
            started = time.monotonic()
            backlog = False
            try:
                turns = sweep(
                    store,
                    agent=agent,
                    limit=limit,
                    older_than=older_than,
                    max_attempts=max_attempts,
                )
            except Exception:
                log.exception("sweep failed; trying again in %.1f s", every)
                totals = attrs.evolve(totals, rounds=totals.rounds + 1, errors=totals.errors + 1)
            else:
                totals = totals.add(turns)
                for turn in turns:
                    log.info("swept %s: %s", turn.turn_id, turn.outcome)
                    if on_swept is not None:
                        on_swept(turn)
                # claimed as many as it may ("taken" ones were passed over): sweep again
                backlog = sum(t.outcome != "taken" for t in turns) >= limit
            if rounds is not None and totals.rounds >= rounds:
                break
            if not backlog:
                stop.wait(max(every - (time.monotonic() - started), 0.0))
    return totals
