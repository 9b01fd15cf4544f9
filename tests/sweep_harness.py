"""Processes of the recovery tests (tests/test_recovery_processes.py), one store per kind.

``python sweep_harness.py worker <kind> <dir> <log>`` starts four durable turns at
once and SIGKILLs itself when each has reached its point:

* session ``m``: inside its first model call;
* session ``n``: inside ``note`` (idempotent);
* session ``c``: inside ``charge`` (``idempotent=False``), after ``note`` finished;
* the single send ``s`` (``agent.send(..., session_id="s")``): inside its model call.

``python sweep_harness.py sweep <kind> <dir> <log>`` sweeps until no turn is left
running and prints its ``SweptTurn`` outcomes as JSON. ``python sweep_harness.py
stall <kind> <dir> <log>`` runs session ``p``'s turn and waits inside the model call
until ``<dir>/go`` exists (the test stops it meanwhile), then prints how it ended.

Every model call and tool run is appended (fsynced) to ``log`` with its process id.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from lousho_sessions import (
    FunctionProvider,
    LeaseLostError,
    Message,
    ModelRequest,
    ToolCall,
    ToolContext,
    create_agent,
    tool,
)
from lousho_sessions.agent import Agent
from lousho_sessions.recovery import stale_turns, sweep
from lousho_sessions.stores.base import AgentStore

#: Seconds a PostgreSQL or Redis lease lives without a heartbeat here: a killed
#: holder's lease runs out soon, a live one on a busy 2-core machine keeps it.
LEASE_TTL = 2.0
WAIT = 45.0
TURNS = ("m.turn-0", "n.turn-0", "c.turn-0", "s.send")


def log(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()} {line}\n")
        f.flush()
        os.fsync(f.fileno())


def open_store(kind: str, path: str) -> Any:
    """The store of ``kind`` for the test directory ``path`` (the same in every process)."""
    if kind == "files":
        from lousho_sessions.stores.files import file_store

        return file_store(path)
    if kind == "sqlite":
        from lousho_sessions.sqlite import SqliteStore

        return SqliteStore(str(Path(path) / "store.db"))
    if kind == "postgres":
        from services_pg import postgres_url, schema_for

        from lousho_sessions.postgres import PostgresStore

        return PostgresStore(
            postgres_url(), schema=schema_for(path), min_size=1, max_size=4, lease_ttl=LEASE_TTL
        )
    if kind == "redis":
        from services_redis import prefix_for, redis_url

        from lousho_sessions.redis import RedisStore

        return RedisStore(redis_url(), prefix=prefix_for(path), lease_ttl=LEASE_TTL)
    raise ValueError(f"unknown store kind {kind!r}")


def build(store: AgentStore, logfile: str, at_point: Any = None) -> Agent:
    """The agent of every process; ``at_point(name)`` is called at each crash point."""

    def reached(name: str) -> None:
        if at_point is not None:
            at_point(name)

    def model(request: ModelRequest) -> Message:
        who = request.messages[0].text.removeprefix("go-")
        done = sum(1 for m in request.messages if m.role == "tool")
        log(logfile, f"model {who} {done + 1}")
        if who in ("m", "s", "p"):
            reached(who)
            return Message.assistant(f"done {who}")
        if done == 0:
            return Message.assistant("", tool_calls=[ToolCall(f"note-{who}", "note", {})])
        if who == "c" and done == 1:
            return Message.assistant("", tool_calls=[ToolCall("charge-c", "charge", {})])
        return Message.assistant(f"done {who}")

    @tool
    def note(ctx: ToolContext) -> str:
        """Write a note (idempotent)."""
        log(logfile, f"note {ctx.session_id} {ctx.idempotency_key}")
        if ctx.session_id == "n":
            reached("n")
        return "noted"

    @tool(idempotent=False)
    def charge(ctx: ToolContext) -> str:
        """Charge a card (must not run twice)."""
        log(logfile, f"charge {ctx.session_id} {ctx.idempotency_key}")
        reached("c")
        return "charged"

    return create_agent(provider=FunctionProvider(model), tools=[note, charge], store=store)


def worker(kind: str, path: str, logfile: str) -> None:
    store = open_store(kind, path)
    everyone = threading.Barrier(4, timeout=WAIT)

    def at_point(name: str) -> None:
        log(logfile, f"at {name}")
        everyone.wait()
        os.kill(os.getpid(), signal.SIGKILL)

    agent = build(store, logfile, at_point)
    threads = [
        threading.Thread(target=agent.session(who).send, args=(f"go-{who}",), daemon=True)
        for who in ("m", "n", "c")
    ]
    threads.append(
        threading.Thread(target=agent.send, args=("go-s",), kwargs={"session_id": "s"}, daemon=True)
    )
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    raise SystemExit("the worker was not killed")


def sweeper(kind: str, path: str, logfile: str) -> None:
    store = open_store(kind, path)
    agent = build(store, logfile)
    outcomes: list[list[Any]] = []
    deadline = time.monotonic() + WAIT
    pause = threading.Event()
    while time.monotonic() < deadline:
        for swept in sweep(store, agent=agent):
            outcomes.append([swept.turn_id, swept.outcome, swept.attempts, repr(swept.error)])
        if not _running(store) and not stale_turns(store):
            break
        pause.wait(0.05)
    agent.close()
    print(json.dumps({"outcomes": outcomes, "left": _running(store)}))


def _running(store: Any) -> list[str]:
    """The turn ids whose checkpoint says running (held, or stale and not swept yet)."""
    checkpoints = store.checkpoints
    left = []
    for turn_id in checkpoints.pending_turns():
        data = checkpoints.load(turn_id)
        if data is not None and data.get("status") == "running":
            left.append(turn_id)
    return left


def stall(kind: str, path: str, logfile: str) -> None:
    store = open_store(kind, path)
    go = Path(path) / "go"
    pause = threading.Event()

    def at_point(name: str) -> None:
        log(logfile, "stalled")
        deadline = time.monotonic() + WAIT
        while not go.exists() and time.monotonic() < deadline:
            pause.wait(0.02)

    agent = build(store, logfile, at_point)
    try:
        result = agent.session("p").send("go-p")
        outcome = f"finished {result.text}"
    except LeaseLostError as exc:
        outcome = f"lease-lost {exc}"
    log(logfile, f"stall ended: {outcome.split()[0]}")
    print(json.dumps({"outcome": outcome}))


if __name__ == "__main__":
    mode, kind, path, logfile = sys.argv[1:5]
    {"worker": worker, "sweep": sweeper, "stall": stall}[mode](kind, path, logfile)
