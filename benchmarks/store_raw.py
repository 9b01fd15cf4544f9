"""Median µs per ``append`` of a 2-message turn, straight on the stores, and storage size.

Compares the file store (a full atomic rewrite per append; with and without its
cache of the transcript's JSON) and SqliteStore (new rows only) at transcript
lengths 10, 1,000 and 5,000, then prints the size of each after 1,000 messages.
Every append is durable as configured: files fsync the file and the directory;
SQLite runs WAL with ``synchronous=NORMAL`` (and ``FULL`` for comparison);
"sqlite fenced" is NORMAL with each append carrying its lease's fence.

Run: ``python benchmarks/store_raw.py`` (or ``make bench``).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from lousho_sessions.messages import Message, Usage
from lousho_sessions.sqlite import SqliteStore
from lousho_sessions.stores import files
from lousho_sessions.stores.base import message_json
from lousho_sessions.stores.files import FileSessionStore

LENGTHS = (10, 1_000, 5_000)
APPENDS = 60  # per length; the transcript grows by 2 each, so 10 ends at 130


def pair(n: int) -> list[Message]:
    """A realistic turn: a short question and a longer answer with usage."""
    return [
        Message.user(f"Question {n}: what changed in the quarterly report for region {n % 7}?"),
        Message.assistant(
            f"Answer {n}: " + "Revenue grew in most regions while costs stayed flat. " * 5,
            usage=Usage(1_200 + n, 180, 0.0021),
        ),
    ]


def transcript(length: int) -> list[Message]:
    return [m for n in range(length // 2) for m in pair(n)]


def time_appends(append: Callable[[list[Message], int], None], length: int) -> float:
    samples = []
    for i in range(APPENDS):
        turn = pair(length + i)
        start = time.perf_counter_ns()
        append(turn, length + 2 * i)
        samples.append((time.perf_counter_ns() - start) / 1_000)
    return statistics.median(samples)


def bench_files(root: Path, length: int, *, cache: bool) -> float:
    saved = files._CACHE_MAX_CHARS
    files._CACHE_MAX_CHARS = saved if cache else 0
    try:
        store = FileSessionStore(root / f"files-{length}-{cache}")
        store.save("bench", transcript(length))
        return time_appends(lambda turn, n: store.append("bench", turn, n), length)
    finally:
        files._CACHE_MAX_CHARS = saved


def bench_sqlite(root: Path, length: int, synchronous: str) -> float:
    with SqliteStore(root / f"sqlite-{length}-{synchronous}.db", synchronous=synchronous) as store:
        store.sessions.save("bench", transcript(length))
        return time_appends(lambda turn, n: store.sessions.append("bench", turn, n), length)


def bench_sqlite_fenced(root: Path, length: int) -> float:
    """As ``bench_sqlite`` NORMAL, each append under a lease carrying its fence (one more SELECT)."""
    with SqliteStore(root / f"sqlite-{length}-fenced.db") as store:
        store.sessions.save("bench", transcript(length))
        with store.turn_lock("bench") as lease:
            return time_appends(
                lambda turn, n: store.sessions.append("bench", turn, n, fence=lease.fence), length
            )


def sizes(root: Path) -> dict[str, int]:
    messages = transcript(1_000)
    raw = sum(len(message_json(m)) for m in messages)
    store = FileSessionStore(root / "size-files")
    for i in range(0, len(messages), 2):  # turn by turn, as sessions write
        store.append("s", messages[i : i + 2], i)
    path = root / "size.db"
    with SqliteStore(path) as db:
        for i in range(0, len(messages), 2):
            db.sessions.append("s", messages[i : i + 2], i)
        with db.connection() as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    wal = Path(str(path) + "-wal")
    return {
        "raw message JSON": raw,
        "file store (s.json)": os.path.getsize(store.path("s")),
        "sqlite (db + wal)": os.path.getsize(path) + (wal.stat().st_size if wal.exists() else 0),
    }


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="lousho-bench-") as tmp:
        root = Path(tmp)
        columns: dict[str, Callable[[int], float]] = {
            "files": lambda n: bench_files(root, n, cache=True),
            "files, no cache": lambda n: bench_files(root, n, cache=False),
            "sqlite NORMAL": lambda n: bench_sqlite(root, n, "NORMAL"),
            "sqlite fenced": lambda n: bench_sqlite_fenced(root, n),
            "sqlite FULL": lambda n: bench_sqlite(root, n, "FULL"),
        }
        results = {name: {n: run(n) for n in LENGTHS} for name, run in columns.items()}
        print("median µs per append of a 2-message turn")
        print(f"{'store':>16} | " + " | ".join(f"{n:>8,}" for n in LENGTHS) + " | t(5000)/t(10)")
        for name, row in results.items():
            cells = " | ".join(f"{row[n]:>8.0f}" for n in LENGTHS)
            print(f"{name:>16} | {cells} | {row[5_000] / row[10]:>13.2f}")
        print()
        print("size after 1,000 messages")
        for name, size in sizes(root).items():
            print(f"{name:>20} | {size / 1024:>8.1f} KiB")


if __name__ == "__main__":
    main()
