"""Median µs per ``session.send`` with an instant model, on the file store and SqliteStore.

Each turn takes the store's turn lock, checks the revision, runs the (instant)
model and appends the turn's two new messages; the agent is given the whole
store, so each turn also writes and then deletes its durable checkpoint, as in
production. SQLite must stay flat —
t(5,000) / t(10) <= 1.5 — and under 1 ms at 5,000 messages. Also prints the
database size after 1,000 messages sent through sessions.

Run: ``python benchmarks/store_turns.py`` (or ``make bench``).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from lousho_sessions import FunctionProvider, Message, Usage, create_agent
from lousho_sessions.providers.base import ModelRequest
from lousho_sessions.sqlite import SqliteStore
from lousho_sessions.stores.files import file_store

LENGTHS = (10, 1_000, 5_000)
ROUNDS = 100
WARMUP = 10


def instant(request: ModelRequest) -> Message:
    return Message.assistant(
        "Revenue grew in most regions while costs stayed flat. " * 5, usage=Usage(1_200, 180)
    )


def history(length: int) -> list[Message]:
    return [
        m
        for n in range(length // 2)
        for m in (
            Message.user(f"Question {n}: what changed in the report for region {n % 7}?"),
            Message.assistant("Revenue grew in most regions while costs stayed flat. " * 5),
        )
    ]


def measure(store: Any, length: int) -> float:
    """Median µs per send on a session that already holds ``length`` messages."""
    store.sessions.save("bench", history(length))
    agent = create_agent(provider=FunctionProvider(instant), store=store)
    session = agent.session("bench")
    for _ in range(WARMUP):  # load the transcript, start the worker
        session.send("warm up")
    samples = []
    for n in range(ROUNDS):
        start = time.perf_counter_ns()
        session.send(f"What about region {n}?")
        samples.append((time.perf_counter_ns() - start) / 1_000)
    session.close()
    agent.close()
    return statistics.median(samples)


def db_size(root: Path) -> int:
    path = root / "size.db"
    with SqliteStore(path) as store:
        agent = create_agent(provider=FunctionProvider(instant), store=store)
        session = agent.session("size")
        for n in range(500):  # 500 turns = 1,000 messages
            session.send(f"Question {n}: what changed in the report for region {n % 7}?")
        session.close()
        agent.close()
        assert len(store.sessions.load("size") or []) == 1_000
        with store.connection() as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    wal = Path(f"{path}-wal")
    return os.path.getsize(path) + (wal.stat().st_size if wal.exists() else 0)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="lousho-bench-") as tmp:
        root = Path(tmp)
        results: dict[str, dict[int, float]] = {"files": {}, "sqlite": {}}
        for n in LENGTHS:
            results["files"][n] = measure(file_store(root / f"files-{n}"), n)
            with SqliteStore(root / f"sqlite-{n}.db") as db:
                results["sqlite"][n] = measure(db, n)
        print("median µs per session.send (instant model, 2 new messages per turn)")
        print(f"{'store':>8} | " + " | ".join(f"{n:>8,}" for n in LENGTHS) + " | t(5000)/t(10)")
        for name, row in results.items():
            cells = " | ".join(f"{row[n]:>8.0f}" for n in LENGTHS)
            print(f"{name:>8} | {cells} | {row[5_000] / row[10]:>13.2f}")
        sqlite = results["sqlite"]
        flat = sqlite[5_000] / sqlite[10] <= 1.5 and sqlite[5_000] < 1_000
        print(
            f"sqlite target (ratio <= 1.5 and < 1,000 µs at 5,000): {'met' if flat else 'MISSED'}"
        )
        print(f"sqlite size after 1,000 messages: {db_size(root) / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
