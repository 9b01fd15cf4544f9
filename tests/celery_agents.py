"""The agent, store and Celery app of the recovery tests' worker and victim processes.

Every process of one test (the victim SIGKILLed mid-turn, the Celery worker, the
``run_sweeper`` child, the test itself) builds the same agent from the environment:

- ``LOUSHO_RECOVERY_DIR``: the test's directory: the SQLite file and the logs;
- ``LOUSHO_RECOVERY_STORE``: ``sqlite``, ``postgres:<schema>`` or ``redis:<prefix>``;
- ``LOUSHO_RECOVERY_HANG=1``: the model's first call of each turn writes
  ``hanging-<session>`` and never returns (the victim: the test kills it there);
  ``=tool``: the tools do that instead;
- ``LOUSHO_CELERY_PREFIX``: the worker's Redis key prefix and queue (``app``);
  ``LOUSHO_CELERY_VISIBILITY``: the broker's ``visibility_timeout``, seconds;
  ``LOUSHO_CELERY_BEAT``: the sweep's beat period, seconds.

The model logs each call to ``model-calls.log`` (``<session> <pid>`` per line) and
the tool each run to ``tool-runs.log``: the side-effect logs the tests count.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from services_pg import postgres_url
from services_redis import redis_url

from lousho_sessions import Agent, Message, ModelRequest, ToolCall, ToolContext, create_agent, tool
from lousho_sessions.providers.function import FunctionProvider

LEASE_TTL = 1.0  # PostgreSQL and Redis: a killed holder's lease runs out this fast


def directory() -> Path:
    return Path(os.environ["LOUSHO_RECOVERY_DIR"])


def log_line(name: str, line: str) -> None:
    """Append one line; O_APPEND keeps lines whole across processes."""
    fd = os.open(directory() / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def log_lines(root: Path, name: str) -> list[str]:
    path = root / name
    return path.read_text().splitlines() if path.exists() else []


def open_store(root: Path, spec: str) -> Any:
    """The store ``spec`` names (``sqlite``, ``postgres:<schema>``, ``redis:<prefix>``)."""
    kind, _, where = spec.partition(":")
    if kind == "sqlite":
        from lousho_sessions.sqlite import SqliteStore

        return SqliteStore(root / "agent.db")
    if kind == "postgres":
        from lousho_sessions.postgres import PostgresStore

        return PostgresStore(postgres_url(), schema=where, max_size=4, lease_ttl=LEASE_TTL)
    if kind == "redis":
        from lousho_sessions.redis import RedisStore

        return RedisStore(redis_url(), prefix=where, lease_ttl=LEASE_TTL)
    raise ValueError(f"unknown store kind {kind!r} in {spec!r}")


def make_store() -> Any:
    """The store ``LOUSHO_RECOVERY_STORE`` names, opened in this process."""
    return open_store(directory(), os.environ.get("LOUSHO_RECOVERY_STORE", "sqlite"))


def hang(session: str) -> None:
    """Write ``hanging-<session>`` and wait until SIGKILLed (the victim processes)."""
    (directory() / f"hanging-{session}").touch()
    threading.Event().wait()


@tool
def record(ctx: ToolContext, note: str) -> str:
    """Record a note (idempotent: the side effect the tests count)."""
    log_line("tool-runs.log", f"{ctx.session_id} {os.getpid()} {ctx.idempotency_key}")
    if os.environ.get("LOUSHO_RECOVERY_HANG") == "tool":
        hang(str(ctx.session_id))
    return f"recorded {note}"


@tool(idempotent=False)
def charge(ctx: ToolContext, note: str) -> str:
    """Charge the customer (not idempotent: a run a crash interrupted must not repeat)."""
    log_line("tool-runs.log", f"{ctx.session_id} {os.getpid()} {ctx.idempotency_key}")
    if os.environ.get("LOUSHO_RECOVERY_HANG") == "tool":
        hang(str(ctx.session_id))
    return f"charged {note}"


def model(request: ModelRequest) -> Message:
    """User message → call ``record`` (``charge`` if the message says so); a tool result →
    the final answer. The session id is the user message's first word."""
    last = request.messages[-1]
    text = next(m for m in request.messages if m.role == "user").text
    session = text.split()[0]
    log_line("model-calls.log", f"{session} {os.getpid()}")
    if last.role == "user":
        if os.environ.get("LOUSHO_RECOVERY_HANG") == "1":
            hang(session)
        name = "charge" if "charge" in text.split() else "record"
        return Message.assistant("", tool_calls=[ToolCall("c1", name, {"note": last.text})])
    return Message.assistant(f"done: {last.text}")


def make_agent(store: Any = None) -> Agent:
    """The agent every process builds (a factory: each process opens its own store)."""
    store = make_store() if store is None else store
    return create_agent(provider=FunctionProvider(model), tools=[record, charge], store=store)


def make_app(prefix: str) -> Any:
    """A Celery app on the test Redis, under ``prefix`` (keys, queue), with a result backend."""
    from celery import Celery

    from lousho_sessions.celery import register_tasks

    app = Celery("lousho_recovery_test", broker=redis_url(), backend=redis_url())
    keyprefix = {"global_keyprefix": f"{prefix}:"}  # under drop_prefix's "<prefix>:*"
    broker: dict[str, object] = dict(keyprefix)
    if os.environ.get("LOUSHO_CELERY_VISIBILITY"):  # redeliver unacked messages this soon
        broker["visibility_timeout"] = float(os.environ["LOUSHO_CELERY_VISIBILITY"])
        broker["unacked_restore_interval"] = 0.5  # look for them this often (default 10 s)
        broker["unacked_restore_throttle"] = 1  # at every look (default: every 10th)
    app.conf.update(
        task_default_queue=prefix,
        broker_transport_options=broker,
        result_backend_transport_options=keyprefix,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        result_expires=600,
        beat_schedule={},
    )
    app.recovery = register_tasks(app, agent="celery_agents:make_agent")
    app.inline = register_tasks(
        app, agent="celery_agents:make_agent", fan_out=False, name_prefix="lousho_inline"
    )
    if os.environ.get("LOUSHO_CELERY_BEAT"):
        app.conf.beat_schedule = {
            "lousho-sweep": app.recovery.beat_entry(every=float(os.environ["LOUSHO_CELERY_BEAT"]))
        }
    return app


app = make_app(os.environ["LOUSHO_CELERY_PREFIX"]) if "LOUSHO_CELERY_PREFIX" in os.environ else None
