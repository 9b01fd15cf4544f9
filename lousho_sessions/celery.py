"""Recovery from Celery: a beat-schedulable sweep task and a fenced ``resume_turn`` task.

Install the ``celery`` extra; the root package never imports this module. Register
the two tasks on your own app, naming the agent (and, when it is not the agent's,
the store) by import path or factory, so every worker process builds its own::

    from celery import Celery
    from lousho_sessions.celery import register_tasks

    app = Celery("shop", broker="redis://localhost:6379/0")
    recovery = register_tasks(app, agent="shop.agents:make_agent")
    app.conf.beat_schedule = {"lousho-sweep": recovery.beat_entry(every=30)}

The sweep task lists the stale turns (``recovery.stale_turns``, read only) and
enqueues one ``resume_turn(turn_id, fence)`` per turn with the fence it saw; the
resume task claims the turn only if the session's fence has not moved past that one
(``recovery.resume_turn(..., fence=fence)``), so a message delivered twice — a
redelivery after ``visibility_timeout``, a worker lost before its ack, two sweeps of
the same turn — finishes the turn once and reports ``"taken"`` the other times.
See docs/durable.md, "Deploying the sweeper".
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import attrs
from celery import signals

from .admin._sweeper import AgentSpec, StoreSpec, resolve_agent, resolve_store
from .agent import Agent
from .errors import LoushoError
from .recovery import SweptTurn, resume_turn, stale_turns, sweep

__all__ = ["RecoveryTasks", "register_tasks", "swept_summary"]


def swept_summary(turn: SweptTurn) -> dict[str, Any]:
    """A ``SweptTurn`` as the JSON object a task returns (no transcript text in it)."""
    return {
        "turn_id": turn.turn_id,
        "session_id": turn.session_id,
        "outcome": turn.outcome,
        "attempts": turn.attempts,
        "finish_reason": None if turn.result is None else turn.result.finish_reason,
        "error": None if turn.error is None else f"{type(turn.error).__name__}: {turn.error}",
    }


class _WorkerObjects:
    """The agent and store the tasks use in this process: resolved on first use.

    Resolved lazily so that importing the app (in beat, in a web process that only
    enqueues) opens nothing, and again in each pool process after the fork: a
    connection pool inherited through ``fork`` is not safe to use.
    """

    def __init__(self, agent: AgentSpec, store: StoreSpec) -> None:
        self._agent_spec = agent
        self._store_spec = store
        self._lock = threading.Lock()
        self._objects: tuple[Agent, Any] | None = None

    def get(self) -> tuple[Agent, Any]:
        with self._lock:
            if self._objects is None:
                agent = resolve_agent(self._agent_spec)
                self._objects = (agent, resolve_store(self._store_spec, agent))
            return self._objects

    def forget(self, **_: Any) -> None:
        """After a fork: resolve again in this process (from the paths or factories)."""
        with self._lock:
            self._objects = None

    def close(self, **_: Any) -> None:
        """At worker shutdown: stop the agent's idle threads (user-owned stores stay open)."""
        with self._lock:
            objects, self._objects = self._objects, None
        if objects is not None:
            objects[0].close()


@attrs.frozen
class RecoveryTasks:
    """The tasks ``register_tasks`` put on the app: ``sweep`` and ``resume_turn``.

    Both are ordinary Celery tasks: ``recovery.sweep.delay()``,
    ``recovery.resume_turn.delay(turn_id, fence)``, their ``.name`` for routing.
    """

    sweep: Any
    resume_turn: Any
    objects: _WorkerObjects = attrs.field(repr=False)

    def beat_entry(self, every: float | timedelta, **kwargs: Any) -> dict[str, Any]:
        """A ``beat_schedule`` entry running the sweep every ``every`` seconds.

        The message expires after one period (a sweep nobody ran in time is
        replaced by the next one rather than queued behind it); ``kwargs`` are the
        sweep's (``limit=``, ``older_than=`` seconds).
        """
        seconds = every.total_seconds() if isinstance(every, timedelta) else every
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
            raise LoushoError(f"every must be a positive number of seconds, got {every!r}")
        return {
            "task": self.sweep.name,
            "schedule": float(seconds),
            "kwargs": kwargs,
            "options": {"expires": float(seconds)},
        }


def _seconds(value: timedelta | float | None, what: str) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
        raise LoushoError(f"{what} must be seconds (a number >= 0) or a timedelta, got {value!r}")
    return float(seconds)


def register_tasks(
    app: Any,
    *,
    agent: AgentSpec,
    store: StoreSpec = None,
    limit: int = 100,
    older_than: timedelta | float | None = None,
    max_attempts: int = 3,
    fan_out: bool = True,
    queue: str | None = None,
    name_prefix: str = "lousho_sessions",
) -> RecoveryTasks:
    """Register ``<name_prefix>.sweep`` and ``<name_prefix>.resume_turn`` on ``app``.

    ``agent``: an ``Agent``, an import path ``"package.module:attr"`` naming one
    or a function of no arguments returning one, or such a function itself.
    ``store``: the same for the store to sweep; ``None`` sweeps the agent's own.
    Paths and factories are resolved in each worker process on its first task
    (again after a prefork pool's fork), so name a factory for a store holding
    connections. ``limit``, ``older_than`` (seconds or a timedelta) and
    ``max_attempts`` are passed to ``recovery``; the sweep task's ``limit`` and
    ``older_than`` keyword arguments override the first two per call.

    ``fan_out=True`` (default): the sweep task enqueues one ``resume_turn`` per
    stale turn, with the fence it saw, so the turns spread over the workers, and
    returns ``{"enqueued": [{"turn_id", "fence", "task_id"}, ...]}``.
    ``fan_out=False``: it runs ``recovery.sweep`` itself and returns ``{"swept":
    [...]}``. ``resume_turn(turn_id, fence=None)`` returns ``swept_summary`` of its
    ``SweptTurn``: ``"taken"`` when the fence moved past ``fence`` (someone else
    claimed the turn since), so redelivery is harmless; it is ``acks_late`` so that
    a message whose worker died before running it is delivered again. ``queue``
    routes both tasks (or use ``task_routes`` with ``"<name_prefix>.*"``).
    """
    default_older = _seconds(older_than, "older_than")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise LoushoError(f"limit must be a positive integer, got {limit!r}")
    objects = _WorkerObjects(agent, store)
    options: dict[str, Any] = {} if queue is None else {"queue": queue}

    @app.task(name=f"{name_prefix}.resume_turn", acks_late=True, **options)  # type: ignore[untyped-decorator]
    def resume_turn_task(turn_id: str, fence: int | None = None) -> dict[str, Any]:
        agent_obj, store_obj = objects.get()
        swept = resume_turn(
            store_obj, turn_id, agent=agent_obj, fence=fence, max_attempts=max_attempts
        )
        return swept_summary(swept)

    @app.task(name=f"{name_prefix}.sweep", **options)  # type: ignore[untyped-decorator]
    def sweep_task(
        limit: int = limit, older_than: float | None = default_older
    ) -> dict[str, list[dict[str, Any]]]:
        agent_obj, store_obj = objects.get()
        older = _seconds(older_than, "older_than")
        if not fan_out:
            turns = sweep(
                store_obj,
                agent=agent_obj,
                limit=limit,
                older_than=older,
                max_attempts=max_attempts,
            )
            return {"swept": [swept_summary(turn) for turn in turns]}
        enqueued = []
        for turn in stale_turns(store_obj, limit=limit, older_than=older):
            if turn.status != "running":
                continue  # abandoned after max_attempts: listed, never resumed again
            sent = resume_turn_task.apply_async((turn.turn_id, turn.fence))
            enqueued.append({"turn_id": turn.turn_id, "fence": turn.fence, "task_id": sent.id})
        return {"enqueued": enqueued}

    signals.worker_process_init.connect(objects.forget, weak=False)
    signals.worker_process_shutdown.connect(objects.close, weak=False)
    signals.worker_shutdown.connect(objects.close, weak=False)
    return RecoveryTasks(sweep=sweep_task, resume_turn=resume_turn_task, objects=objects)
