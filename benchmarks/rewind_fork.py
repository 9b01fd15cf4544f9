"""``rewind`` and ``fork`` of a 50,000-message session: store writes, full loads and time.

A transcript of 50,000 messages is saved once per store; then ``store.sessions.rewind``
keeps the first half and ``store.sessions.fork`` copies the first quarter to a new
session. Printed for each: how many write transactions or scripts the store ran, how
many times the whole transcript was read (``load``), and the wall time (median of
``--rounds``, the session saved again between rounds).

Target (issue 31): each takes one store write and no full load.

Stores: SQLite always; PostgreSQL and Redis when reachable (``LOUSHO_POSTGRES_URL``,
``LOUSHO_REDIS_URL`` or the local defaults).

Run: ``python benchmarks/rewind_fork.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lousho_sessions import Message, Usage
from lousho_sessions.stores.base import ForkRequest, RewindRequest

MESSAGES = 50_000


def transcript(n: int) -> list[Message]:
    return [
        Message.user(f"question {i}")
        if i % 2 == 0
        else Message.assistant(f"answer {i}", usage=Usage(12, 30, 0.0001))
        for i in range(n)
    ]


class Counter:
    """Counts calls of the wrapped methods of one object (set on the instance)."""

    def __init__(self) -> None:
        self.calls = 0

    def wrap(self, obj: Any, name: str) -> None:
        method = getattr(obj, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return method(*args, **kwargs)

        setattr(obj, name, counted)


def stores(tmp: Path) -> Iterator[tuple[str, Any, Callable[[Counter], None]]]:
    from lousho_sessions.sqlite import SqliteStore

    sqlite = SqliteStore(tmp / "bench.db")
    yield "sqlite", sqlite, lambda c: c.wrap(sqlite, "transaction")
    sqlite.close()
    try:
        from lousho_sessions.postgres import PostgresStore

        url = os.environ.get("LOUSHO_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
        pg = PostgresStore(url, schema="bench_rewind_fork")
    except Exception as exc:  # not reachable: say so and go on
        print(f"postgres: skipped ({type(exc).__name__}: {exc})")
    else:
        yield "postgres", pg, lambda c: c.wrap(pg, "transaction")
        pg.close()
    try:
        from lousho_sessions.redis import RedisStore

        redis_store = RedisStore(
            os.environ.get("LOUSHO_REDIS_URL", "redis://127.0.0.1:6379/0"), prefix="bench-rf"
        )
        redis_store.sessions.revision("probe")
    except Exception as exc:
        print(f"redis: skipped ({type(exc).__name__}: {exc})")
    else:

        def count(c: Counter) -> None:
            c.wrap(redis_store, "run_on")  # every script goes through it (``run`` too)

        yield "redis", redis_store, count
        redis_store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    messages = transcript(MESSAGES)
    print(f"{MESSAGES} messages; load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        for name, store, count_writes in stores(Path(tmp)):
            sessions = store.sessions
            loads = Counter()
            loads.wrap(sessions, "load")
            writes = Counter()
            count_writes(writes)
            timings: dict[str, list[float]] = {"rewind": [], "fork": []}
            counts: dict[str, tuple[int, int]] = {}
            for n in range(rounds):
                for id in ("big", f"copy-{n}"):
                    sessions.delete(id)
                sessions.save("big", messages)
                requests: list[tuple[str, Callable[[Any], Any], Any]] = [
                    ("fork", sessions.fork, ForkRequest("big", f"copy-{n}", MESSAGES // 4)),
                    ("rewind", sessions.rewind, RewindRequest("big", MESSAGES // 2)),
                ]
                for verb, call, request in requests:
                    loads.calls = writes.calls = 0
                    started = time.perf_counter()
                    call(request)
                    timings[verb].append(time.perf_counter() - started)
                    counts[verb] = (writes.calls, loads.calls)
            for verb in ("rewind", "fork"):
                w, full = counts[verb]
                ms = statistics.median(timings[verb]) * 1000
                print(f"{name:8} {verb:6}  store writes {w}  full loads {full}  {ms:8.1f} ms")
            for n in range(rounds):
                sessions.delete(f"copy-{n}")
            sessions.delete("big")


if __name__ == "__main__":
    main()
