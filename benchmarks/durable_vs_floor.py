"""A durable SQLite turn ÷ the floor: a raw stdlib sqlite3 WAL transaction of 2 INSERTs.

The turn: ``session.send`` with an instant ``FunctionProvider`` on a
``SqliteStore`` given whole to the agent (checkpoints on), with no tool call and
with one tool call (two model calls, four new messages). The floor: a plain
``sqlite3`` connection in WAL mode doing ``BEGIN IMMEDIATE``, two ``INSERT``
rows of message JSON, ``COMMIT`` — the least a durable turn could write. Both
run with ``synchronous=NORMAL`` and ``FULL``, interleaved in blocks so that a
change in machine load hits both; the ratio of the medians is the figure.

Per turn it also counts, rather than estimates:

- transactions (``COMMIT`` statements, plus any write outside ``BEGIN``) and the
  other statements, from ``sqlite3.Connection.set_trace_callback`` installed on
  the store's connection through ``SqliteStore.connection()``;
- ``fsync``/``fdatasync`` calls: those made from Python (``os.fsync`` and
  ``os.fdatasync`` wrapped while counting) and, when ``strace`` is installed,
  every one the process makes (SQLite's own), by file, from a child process run
  under ``strace -f -y``; without ``strace`` it says that these were not counted.

Run: ``python benchmarks/durable_vs_floor.py [--quick]`` (or ``make bench``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lousho_sessions import (
    FunctionProvider,
    Message,
    ModelRequest,
    ToolCall,
    create_agent,
    memory_store,
    tool,
)
from lousho_sessions.sqlite import SqliteStore

ROUNDS = 400  # timed operations per configuration (turns, and as many floor transactions)
BLOCK = 20  # floor and turn alternate in blocks of this many
COUNTED = 40  # turns counted (statements, fsyncs); not timed
WARMUP = 20
MARKER = "lousho-bench-fsync-marker"
USER_JSON = json.dumps({"role": "user", "content": [{"type": "text", "text": "weather?"}]})
REPLY_JSON = json.dumps({"role": "assistant", "content": [{"type": "text", "text": "Sunny."}]})


def machine() -> str:
    one, five, fifteen = os.getloadavg()
    return (
        f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1/5/15 min), {os.cpu_count()} CPUs"
    )


@tool
def lookup(city: str) -> str:
    """Instant tool."""
    return "sunny"


def no_tool(request: ModelRequest) -> Message:
    return Message.assistant("Sunny.")


def one_tool(request: ModelRequest) -> Message:
    if request.messages[-1].role == "tool":
        return Message.assistant("Sunny.")
    return Message.assistant("", tool_calls=[ToolCall("c1", "lookup", {"city": "Paris"})])


class Floor:
    """The least a durable turn could do: one WAL transaction of 2 INSERTs."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute(f"PRAGMA synchronous = {synchronous}")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS messages (session_id TEXT NOT NULL, seq INTEGER NOT NULL, "
            "json TEXT NOT NULL, PRIMARY KEY (session_id, seq))"
        )
        self.seq = 0

    def write(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute("INSERT INTO messages VALUES (?, ?, ?)", ("bench", self.seq, USER_JSON))
        self.conn.execute(
            "INSERT INTO messages VALUES (?, ?, ?)", ("bench", self.seq + 1, REPLY_JSON)
        )
        self.conn.execute("COMMIT")
        self.seq += 2

    def close(self) -> None:
        self.conn.close()


class Turn:
    """A durable session turn on a SqliteStore with checkpoints (``path`` None: the same turn
    on ``memory_store()``, checkpoints too: what the engine costs without a database)."""

    def __init__(self, path: Path | None, synchronous: str, with_tool: bool) -> None:
        self.store: Any = (
            memory_store() if path is None else SqliteStore(path, synchronous=synchronous)
        )
        self.agent = create_agent(
            provider=FunctionProvider(one_tool if with_tool else no_tool),
            tools=[lookup] if with_tool else [],
            store=self.store,
        )
        self.session = self.agent.session("bench")

    def write(self) -> None:
        self.session.send("weather?")

    def close(self) -> None:
        self.session.close()
        self.agent.close()
        if isinstance(self.store, SqliteStore):
            self.store.close()


class Statements:
    """Counts the statements a connection runs, by kind, from its trace callback."""

    def __init__(self) -> None:
        self.kinds: collections.Counter[str] = collections.Counter()
        self.in_transaction = False

    def __call__(self, sql: str) -> None:
        kind = sql.split(None, 1)[0].upper() if sql.strip() else "?"
        if kind == "BEGIN":
            self.in_transaction = True
        elif kind in ("COMMIT", "END", "ROLLBACK"):
            self.in_transaction = False
        elif kind in ("INSERT", "UPDATE", "DELETE", "REPLACE") and not self.in_transaction:
            kind = "AUTOCOMMIT-WRITE"  # a transaction of its own
        self.kinds[kind] += 1

    @property
    def transactions(self) -> int:
        return self.kinds["COMMIT"] + self.kinds["END"] + self.kinds["AUTOCOMMIT-WRITE"]


@contextmanager
def python_fsyncs() -> Iterator[list[int]]:
    """Count ``os.fsync``/``os.fdatasync`` calls made from Python while inside."""
    count = [0]
    saved_fsync, saved_fdatasync = os.fsync, getattr(os, "fdatasync", None)

    def wrap(call: Callable[[Any], None]) -> Callable[[Any], None]:
        def counted(fd: Any) -> None:
            count[0] += 1
            call(fd)

        return counted

    setattr(os, "fsync", wrap(saved_fsync))  # noqa: B010 - a benchmark's counter
    if saved_fdatasync is not None:
        setattr(os, "fdatasync", wrap(saved_fdatasync))  # noqa: B010
    try:
        yield count
    finally:
        setattr(os, "fsync", saved_fsync)  # noqa: B010
        if saved_fdatasync is not None:
            setattr(os, "fdatasync", saved_fdatasync)  # noqa: B010


def counted_turns(root: Path, synchronous: str, with_tool: bool, turns: int) -> dict[str, float]:
    """Statements by kind and Python-level fsyncs per turn."""
    turn = Turn(root / f"count-{synchronous}-{with_tool}.db", synchronous, with_tool)
    try:
        for _ in range(WARMUP):
            turn.write()
        statements = Statements()
        with turn.store.connection() as conn:
            conn.set_trace_callback(statements)
        with python_fsyncs() as fsyncs:
            for _ in range(turns):
                turn.write()
        with turn.store.connection() as conn:
            conn.set_trace_callback(None)
    finally:
        turn.close()
    counts = {kind: n / turns for kind, n in statements.kinds.items()}
    counts["transactions"] = statements.transactions / turns
    counts["python fsyncs"] = fsyncs[0] / turns
    return counts


def timed(root: Path, synchronous: str, with_tool: bool, rounds: int) -> tuple[float, float, float]:
    """Median µs of the floor transaction, of the same turn on ``memory_store()`` and of the
    durable turn, measured interleaved."""
    floor = Floor(root / f"floor-{synchronous}-{with_tool}.db", synchronous)
    memory = Turn(None, synchronous, with_tool)
    turn = Turn(root / f"turn-{synchronous}-{with_tool}.db", synchronous, with_tool)
    floor_samples: list[float] = []
    memory_samples: list[float] = []
    turn_samples: list[float] = []
    operations = (
        (floor.write, floor_samples),
        (memory.write, memory_samples),
        (turn.write, turn_samples),
    )
    try:
        for _ in range(WARMUP):
            for operation, _samples in operations:
                operation()
        for _ in range(max(rounds // BLOCK, 1)):
            for operation, samples in operations:
                for _ in range(BLOCK):
                    start = time.perf_counter_ns()
                    operation()
                    samples.append((time.perf_counter_ns() - start) / 1_000)
    finally:
        floor.close()
        memory.close()
        turn.close()
    return (
        statistics.median(floor_samples),
        statistics.median(memory_samples),
        statistics.median(turn_samples),
    )


def fsync_child(root: Path, synchronous: str, with_tool: bool, turns: int) -> None:
    """Run under strace: marker, ``turns`` floor transactions, marker, ``turns`` turns, marker."""
    floor = Floor(root / f"strace-floor-{synchronous}-{with_tool}.db", synchronous)
    turn = Turn(root / f"strace-turn-{synchronous}-{with_tool}.db", synchronous, with_tool)
    marker = os.open(root / MARKER, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        for _ in range(WARMUP):
            floor.write()
            turn.write()
        os.fsync(marker)
        for _ in range(turns):
            floor.write()
        os.fsync(marker)
        for _ in range(turns):
            turn.write()
        os.fsync(marker)
    finally:
        os.close(marker)
        floor.close()
        turn.close()


_SYNC_CALL = re.compile(r"\b(fsync|fdatasync)\(\d+<(?P<path>[^>]*)>")


def strace_fsyncs(
    root: Path, synchronous: str, with_tool: bool, turns: int
) -> tuple[dict[str, float], dict[str, float]] | str:
    """Per-operation fsyncs by file kind for (floor, turn), or why they could not be counted."""
    strace = shutil.which("strace")
    if strace is None:
        return "not counted: strace is not installed (apt-get install strace)"
    out = root / f"strace-{synchronous}-{with_tool}.txt"
    command = [
        strace,
        "-f",
        "-qq",
        "-y",
        "-e",
        "trace=fsync,fdatasync",
        "-o",
        str(out),
        sys.executable,
        __file__,
        "--fsync-child",
        str(root),
        synchronous,
        str(int(with_tool)),
        str(turns),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0 or not out.exists():
        return f"not counted: strace failed ({done.returncode}): {done.stderr.strip()[:200]}"
    sections: list[collections.Counter[str]] = []
    for line in out.read_text().splitlines():
        found = _SYNC_CALL.search(line)
        if found is None or "resumed>" in line:
            continue
        path = found["path"]
        if path.endswith(MARKER):
            sections.append(collections.Counter())
        elif sections:
            kind = "wal" if path.endswith("-wal") else "db" if path.endswith(".db") else "other"
            sections[-1][kind] += 1
    if len(sections) < 3:
        return "not counted: the strace output has no markers (was the child traced?)"
    floor, turn = sections[0], sections[1]
    return (
        {k: v / turns for k, v in floor.items()} | {"total": sum(floor.values()) / turns},
        {k: v / turns for k, v in turn.items()} | {"total": sum(turn.values()) / turns},
    )


def describe(counts: dict[str, float]) -> str:
    if not counts or counts.get("total", 0) == 0:
        return "0"
    parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(counts.items()) if k != "total")
    return f"{counts['total']:.2f} ({parts})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--rounds", type=int, default=None, help=f"timed turns (default {ROUNDS})")
    parser.add_argument("--fsync-child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fsync_child:
        root, synchronous, with_tool, turns = args.fsync_child
        fsync_child(Path(root), synchronous, with_tool == "1", int(turns))
        return
    rounds = args.rounds or (60 if args.quick else ROUNDS)
    counted = 10 if args.quick else COUNTED
    print(f"durable SQLite turn vs raw 2-INSERT WAL transaction; {machine()}")
    print(f"{rounds} timed turns per row (interleaved with the floor in blocks of {BLOCK})")
    print()
    print(
        "floor: the raw transaction; memory: the same turn on memory_store() (the engine's own\n"
        "cost: two thread hand-offs, the turn, its checkpoint, no database); turn: on SqliteStore"
    )
    print()
    header = (
        f"{'sync':<6} | {'tool calls':>10} | {'floor µs':>8} | {'memory µs':>9} | {'turn µs':>8} |"
        f" {'÷ floor':>7} | {'÷ memory':>8}"
    )
    print(header)
    notes: list[str] = []
    counts: dict[tuple[str, bool], dict[str, float]] = {}
    syncs: dict[tuple[str, bool], tuple[dict[str, float], dict[str, float]] | str] = {}
    with tempfile.TemporaryDirectory(prefix="lousho-bench-") as tmp:
        root = Path(tmp)
        for synchronous in ("NORMAL", "FULL"):
            for with_tool in (False, True):
                floor_us, memory_us, turn_us = timed(root, synchronous, with_tool, rounds)
                print(
                    f"{synchronous:<6} | {int(with_tool):>10} | {floor_us:>8.0f} | {memory_us:>9.0f} |"
                    f" {turn_us:>8.0f} | {turn_us / floor_us:>6.1f}x | {turn_us / memory_us:>7.2f}x"
                    f"   (load {os.getloadavg()[0]:.2f})"
                )
                counts[synchronous, with_tool] = counted_turns(
                    root, synchronous, with_tool, counted
                )
                syncs[synchronous, with_tool] = strace_fsyncs(root, synchronous, with_tool, counted)
    print()
    print(f"per turn, counted over {counted} turns (the floor: 1 transaction, 2 INSERTs)")
    for (synchronous, with_tool), row in counts.items():
        statements = ", ".join(
            f"{k} {v:.2f}"
            for k, v in sorted(row.items())
            if k not in ("transactions", "python fsyncs")
        )
        print(
            f"{synchronous:<6} {int(with_tool)} tool call(s): transactions {row['transactions']:.2f};"
            f" fsyncs from Python {row['python fsyncs']:.2f}; statements: {statements}"
        )
        found = syncs[synchronous, with_tool]
        if isinstance(found, str):
            notes.append(found)
            print(f"{'':<6}   all fsyncs: {found}")
        else:
            floor, turn = found
            print(f"{'':<6}   all fsyncs (strace): turn {describe(turn)}; floor {describe(floor)}")
    if notes:
        print()
        print("note: fsyncs made by SQLite itself were " + notes[0])


if __name__ == "__main__":
    main()
