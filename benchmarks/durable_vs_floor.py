"""A durable SQLite turn ÷ the floor: a raw stdlib sqlite3 WAL transaction of 2 INSERTs.

The turn: ``session.send`` with an instant ``FunctionProvider`` on a
``SqliteStore`` given whole to the agent (checkpoints on), with no tool call and
with one tool call (two model calls, four new messages). The floor: a plain
``sqlite3`` connection in WAL mode doing ``BEGIN IMMEDIATE``, two ``INSERT``
rows of message JSON, ``COMMIT`` — the least a durable turn could write. Both
run with ``synchronous=NORMAL`` and ``FULL``, interleaved in blocks so that a
change in machine load hits both; the ratio of the medians is the figure.

Beside them, in the same blocks, two references that split the turn's cost:

- *memory*: the same turn on ``memory_store()``: the engine with no database;
- *bound*: what any turn built as this one is must do, done with nothing else: the
  turn's own statements (the ones counted below, with the JSON a real turn wrote,
  read back from its database beforehand) on a bare ``sqlite3`` connection to a
  database of the store's schema, plus an ``open``/``flock``/``close`` of a lock
  file, run on a worker thread the caller hands the turn to and waits for through a
  ``Future`` (the SPEC's one worker thread per session). ``bound ÷ floor`` is the
  least that turn could cost with no Python engine at all; what the turn costs
  above the bound is the engine. The bound's two parts are timed too: the
  statements and lock file alone on the caller's thread, and the hand-off alone.

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
import fcntl
import json
import os
import queue
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
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
from lousho_sessions.stores._sqlite_records import SAVE_CHECKPOINT
from lousho_sessions.stores._sqlite_turns import RECORD_FENCE
from lousho_sessions.stores._state_requests import state_key
from lousho_sessions.stores.sqlite import _AT_START, _FENCE_AND_ROW, _TOUCH

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


class Written:
    """The JSON a real turn writes: its checkpoint(s), read while the model is called, and
    its new messages, read after it."""

    def __init__(self, root: Path, with_tool: bool) -> None:
        path = Path(tempfile.mkdtemp(dir=root)) / "written.db"  # a new one each time
        self.checkpoints: list[str] = []

        def model(request: ModelRequest) -> Message:
            with sqlite3.connect(path) as conn:
                self.checkpoints = [
                    row[0] for row in conn.execute("SELECT json FROM checkpoints ORDER BY turn_id")
                ]
            return (one_tool if with_tool else no_tool)(request)

        store = SqliteStore(path)
        agent = create_agent(
            provider=FunctionProvider(model), tools=[lookup] if with_tool else [], store=store
        )
        try:
            with agent.session("bench") as session:
                session.send("weather?")
        finally:
            agent.close()
            store.close()
        with sqlite3.connect(path) as conn:
            self.messages = [
                row[0] for row in conn.execute("SELECT json FROM messages ORDER BY seq")
            ]


def _nothing() -> None:
    pass


class Bound:
    """The turn's own work with no engine: its statements on a bare connection (a database
    of the store's schema), a lock file's open/flock/close, on a worker thread the caller
    waits for through a ``Future``."""

    def __init__(self, path: Path, synchronous: str, written: Written, with_tool: bool) -> None:
        SqliteStore(path).close()  # the schema, as the store makes it
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute(f"PRAGMA synchronous = {synchronous}")
        self.lock_path = str(path) + ".lock"
        self.written, self.with_tool = written, with_tool
        self.turns = 0
        self.jobs: queue.SimpleQueue[tuple[Future[None], Callable[[], None]] | None] = (
            queue.SimpleQueue()
        )
        self.worker = threading.Thread(target=self._work, daemon=True)
        self.worker.start()

    def _work(self) -> None:
        while (job := self.jobs.get()) is not None:
            future, work = job
            work()
            future.set_result(None)

    def _turn(self) -> None:
        conn, written, n = self.conn, self.written, self.turns
        self.turns += 1
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            turn_id = f"bench.turn-{n}"
            conn.execute(_AT_START, ("bench", "bench.", "bench/", state_key("bench"))).fetchone()
            checkpoints = written.checkpoints
            saves = [(turn_id, checkpoints[0])]
            deletes = [turn_id]
            if self.with_tool:  # the tool call's intent, then its result
                results = f"{turn_id}-r1-1"
                saves += [(turn_id, checkpoints[0]), (results, checkpoints[-1])]
                deletes.insert(0, results)
            for i, (key, text) in enumerate(saves):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("SELECT fence FROM leases WHERE session_id = ?", ("bench",)).fetchone()
                if i == 0:  # the turn's new fence
                    conn.execute(RECORD_FENCE, ("bench", n + 1))
                conn.execute(SAVE_CHECKPOINT, (key, text, time.time()))
                conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(_FENCE_AND_ROW, ("bench",)).fetchone()
            length = n * len(written.messages)
            conn.executemany(
                "INSERT INTO messages (session_id, seq, json) VALUES (?, ?, ?)",
                [("bench", length + i, text) for i, text in enumerate(written.messages)],
            )
            conn.execute(_TOUCH, ("bench", length + len(written.messages), n, time.time()))
            for key in deletes:
                conn.execute("DELETE FROM checkpoints WHERE turn_id = ?", (key,))
            conn.execute("COMMIT")
        finally:
            os.close(fd)

    def _handed(self, work: Callable[[], None]) -> None:
        future: Future[None] = Future()
        self.jobs.put((future, work))
        future.result()

    def write(self) -> None:
        """The bound: the statements and lock file on the worker, the caller waiting."""
        self._handed(self._turn)

    def statements(self) -> None:
        """Its parts: the statements and lock file alone, on the caller's thread..."""
        self._turn()

    def hand_off(self) -> None:
        """...and the hand-off alone (the worker does nothing)."""
        self._handed(_nothing)

    def close(self) -> None:
        self.jobs.put(None)
        self.worker.join()
        self.conn.close()


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


def timed(root: Path, synchronous: str, with_tool: bool, rounds: int) -> dict[str, float]:
    """Median µs of the floor transaction, the bound and its two parts, the same turn on
    ``memory_store()`` and the durable turn, measured interleaved in blocks."""
    floor = Floor(root / f"floor-{synchronous}-{with_tool}.db", synchronous)
    bound = Bound(
        root / f"bound-{synchronous}-{with_tool}.db",
        synchronous,
        Written(root, with_tool),
        with_tool,
    )
    memory = Turn(None, synchronous, with_tool)
    turn = Turn(root / f"turn-{synchronous}-{with_tool}.db", synchronous, with_tool)
    operations: dict[str, tuple[Callable[[], None], list[float]]] = {
        "floor": (floor.write, []),
        "bound": (bound.write, []),
        "statements": (bound.statements, []),
        "hand-off": (bound.hand_off, []),
        "memory": (memory.write, []),
        "turn": (turn.write, []),
    }
    try:
        for _ in range(WARMUP):
            for operation, _samples in operations.values():
                operation()
        for _ in range(max(rounds // BLOCK, 1)):
            for operation, samples in operations.values():
                for _ in range(BLOCK):
                    start = time.perf_counter_ns()
                    operation()
                    samples.append((time.perf_counter_ns() - start) / 1_000)
    finally:
        floor.close()
        bound.close()
        memory.close()
        turn.close()
    return {name: statistics.median(samples) for name, (_op, samples) in operations.items()}


def bound_statements(root: Path, with_tool: bool, turns: int) -> dict[str, float]:
    """Statements by kind per turn of the bound (to set beside the turn's)."""
    bound = Bound(
        root / f"bound-count-{with_tool}.db", "NORMAL", Written(root, with_tool), with_tool
    )
    statements = Statements()
    try:
        bound.write()
        bound.conn.set_trace_callback(statements)
        for _ in range(turns):
            bound.write()
        bound.conn.set_trace_callback(None)
    finally:
        bound.close()
    return {kind: n / turns for kind, n in statements.kinds.items()}


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
        "floor: the raw transaction; bound: the turn's own statements on a bare connection, a lock\n"
        "file, one hand-off to a worker thread and back (no engine); memory: the same turn on\n"
        "memory_store() (the engine with no database); turn: on SqliteStore"
    )
    print()
    header = (
        f"{'sync':<6} | {'tool calls':>10} | {'floor µs':>8} | {'bound µs':>8} | {'memory µs':>9} |"
        f" {'turn µs':>8} | {'bound ÷ floor':>13} | {'turn ÷ floor':>12} | {'turn - bound µs':>15}"
    )
    print(header)
    notes: list[str] = []
    parts: list[str] = []
    counts: dict[tuple[str, bool], dict[str, float]] = {}
    syncs: dict[tuple[str, bool], tuple[dict[str, float], dict[str, float]] | str] = {}
    with tempfile.TemporaryDirectory(prefix="lousho-bench-") as tmp:
        root = Path(tmp)
        for synchronous in ("NORMAL", "FULL"):
            for with_tool in (False, True):
                us = timed(root, synchronous, with_tool, rounds)
                floor_us, bound_us, memory_us, turn_us = (
                    us["floor"],
                    us["bound"],
                    us["memory"],
                    us["turn"],
                )
                parts.append(
                    f"{synchronous:<6} {int(with_tool)} tool call(s): statements and lock file "
                    f"{us['statements']:.0f} µs ({us['statements'] / floor_us:.1f}x the floor) on "
                    f"the caller's thread; the hand-off alone {us['hand-off']:.0f} µs "
                    f"({us['hand-off'] / floor_us:.1f}x)"
                )
                print(
                    f"{synchronous:<6} | {int(with_tool):>10} | {floor_us:>8.0f} | {bound_us:>8.0f} |"
                    f" {memory_us:>9.0f} | {turn_us:>8.0f} | {bound_us / floor_us:>12.1f}x |"
                    f" {turn_us / floor_us:>11.1f}x | {turn_us - bound_us:>15.0f}"
                    f"   (load {os.getloadavg()[0]:.2f})"
                )
                counts[synchronous, with_tool] = counted_turns(
                    root, synchronous, with_tool, counted
                )
                syncs[synchronous, with_tool] = strace_fsyncs(root, synchronous, with_tool, counted)
        bounds = {
            with_tool: bound_statements(root, with_tool, counted) for with_tool in (False, True)
        }
    print()
    print("the bound's parts, timed in the same blocks:")
    for line in parts:
        print(line)
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
        if synchronous == "NORMAL":
            bound = ", ".join(f"{k} {v:.2f}" for k, v in sorted(bounds[with_tool].items()))
            print(f"{'':<6}   the bound's statements: {bound}")
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
