"""Where a durable SQLite turn spends its time: a cProfile and the system calls per turn.

One ``SqliteStore`` (``synchronous=NORMAL``, checkpoints on) and an instant
model, no tool call. After a warm-up, ``--turns`` turns (default 300) are
measured three ways:

1. cProfile of both threads a turn runs on: the caller (``session.send``) and
   the session's worker thread (cProfile profiles one thread; the model function
   switches the worker's profiler on in the first measured turn and off in the
   turn after the last, so exactly ``--turns`` turns are covered). Prints the
   top functions by own time and per-turn call counts of the calls that matter
   for the plan: JSON encodes/decodes, SQL statements, lock calls, ``stat``,
   ``getpid``, ``mkdir``. cProfile sees only explicit calls: ``with lock:`` on a
   C lock is not a call it records, so Python lock counts are a floor.
2. Statements per turn by kind, from the store connection's trace callback.
3. With ``strace`` installed: every system call per turn, by name (SQLite's own
   included), counted between two marker ``fsync`` calls on a file of their own.

cProfile slows pure-Python code several times over: read its figures as shares
and counts, not as µs (``durable_vs_floor.py`` has the timings).

Run: ``python benchmarks/profile_turn.py [--quick]`` (or ``make bench``).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import os
import pstats
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lousho_sessions import FunctionProvider, Message, ModelRequest, create_agent
from lousho_sessions.sqlite import SqliteStore

TURNS = 300
QUICK_TURNS = 50
WARMUP = 30
MARKER = "lousho-bench-profile-marker"
#: (label, pattern on "file:line(function)", calls per use) of the calls counted per turn;
#: cProfile counts a generator-based context manager twice per ``with`` (enter and exit)
WATCHED = (
    ("JSON encodes", r"json/encoder.py:\d+\(encode\)", 1),
    ("JSON decodes", r"json/__init__.py:\d+\(loads\)|\(_loads_compact\)", 1),
    ("serde.message_json", r"serde.py:\d+\(message_json\)", 1),
    ("serde.to_json", r"serde.py:\d+\(to_json\)", 1),
    ("cattrs unstructure (all levels)", r"\(unstructure\)|unstructure_", 1),
    ("sqlite3 execute/executemany", r"method 'execute(many)?' of 'sqlite3", 1),
    ("SqliteStore.transaction uses", r"_sqlite_db.py:\d+\(transaction\)", 2),
    ("SqliteStore.connection uses", r"_sqlite_db.py:\d+\(connection\)", 2),
    ("SqliteStore._check_identity", r"\(_check_identity\)", 1),
    ("revision()", r"sqlite.py:\d+\(revision\)", 1),
    ("lock acquire (explicit)", r"method 'acquire' of '_thread", 1),
    ("lock release (explicit)", r"method 'release' of '_thread", 1),
    ("Condition/Event wait", r"threading.py:\d+\(wait\)", 1),
    ("fcntl.flock", r"built-in method fcntl.flock", 1),
    ("os.open", r"built-in method posix.open\b", 1),
    ("os.close", r"built-in method posix.close\b", 1),
    ("os.stat", r"built-in method posix.stat\b", 1),
    ("os.lstat", r"built-in method posix.lstat\b", 1),
    ("os.fstat", r"built-in method posix.fstat\b", 1),
    ("os.mkdir", r"built-in method posix.mkdir\b", 1),
    ("os.getpid", r"built-in method posix.getpid\b", 1),
    ("secrets/random", r"randbits|token_hex|urandom", 1),
    ("uuid4", r"uuid.py:\d+\(uuid4\)", 1),
    ("thread hand-off (queue put/get)", r"queue.py:\d+\((put|get)\)", 1),
)


def machine() -> str:
    one, five, fifteen = os.getloadavg()
    return (
        f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1/5/15 min), {os.cpu_count()} CPUs"
    )


class Switch:
    """Turns the worker thread's profiler on or off from inside the model call."""

    def __init__(self, profiler: cProfile.Profile) -> None:
        self.profiler = profiler
        self.action: str | None = None

    def model(self, request: ModelRequest) -> Message:
        if self.action == "on":
            self.profiler.enable()
        elif self.action == "off":
            self.profiler.disable()
        self.action = None
        return Message.assistant("Sunny.")


def profile(root: Path, turns: int) -> tuple[pstats.Stats, collections.Counter[str], float]:
    # CPU time of the thread, so the caller's wait for the worker does not count
    worker = cProfile.Profile(time.thread_time)
    caller = cProfile.Profile(time.thread_time)
    switch = Switch(worker)
    statements: collections.Counter[str] = collections.Counter()
    with SqliteStore(root / "profile.db") as store:
        agent = create_agent(provider=FunctionProvider(switch.model), store=store)
        session = agent.session("bench")
        for _ in range(WARMUP):
            session.send("weather?")
        switch.action = "on"
        start = time.perf_counter()
        caller.enable()
        for _ in range(turns):
            session.send("weather?")
        caller.disable()
        elapsed = time.perf_counter() - start
        switch.action = "off"
        session.send("weather?")
        # statements counted over as many turns again, not profiled
        with store.connection() as conn:
            conn.set_trace_callback(lambda sql: statements.update([sql.split(None, 1)[0].upper()]))
        for _ in range(turns):
            session.send("weather?")
        with store.connection() as conn:
            conn.set_trace_callback(None)
        agent.close()
    return pstats.Stats(worker).add(caller), statements, elapsed


def print_profile(stats: pstats.Stats, statements: collections.Counter[str], turns: int) -> None:
    raw = stats.stats  # type: ignore[attr-defined]
    rows = []
    for (filename, line, name), (_, calls, own, cumulative, _) in raw.items():
        label = f"{filename}:{line}({name})" if line else f"{filename}({name})"
        if filename == "~":
            label = name
        rows.append((label, calls, own, cumulative))
    total = sum(row[2] for row in rows)
    print(
        f"top functions by own CPU time (cProfile, both threads; {total / turns * 1e6:.0f} µs CPU per turn)"
    )
    print(f"{'own %':>6} | {'cum %':>6} | {'calls/turn':>10} | function")
    for label, calls, own, cumulative in sorted(rows, key=lambda r: -r[2])[:25]:
        short = re.sub(r"^.*/(lousho_sessions|lib/python3\.\d+)/", "", label)
        print(
            f"{own / total * 100:>6.1f} | {cumulative / total * 100:>6.1f} |"
            f" {calls / turns:>10.2f} | {short}"
        )
    print()
    print("calls per turn (cProfile; 'with lock:' on a C lock is not a call it sees);")
    print("cum % is the largest inclusive share among the functions a row matches")
    for name, pattern, per_use in WATCHED:
        matcher = re.compile(pattern)
        matched = [row for row in rows if matcher.search(row[0])]
        calls = sum(row[1] for row in matched) / per_use
        # cumulative times of nested matches overlap: show the largest one (a lower bound)
        cumulative = max((row[3] for row in matched), default=0.0)
        print(f"{name:<32} | {calls / turns:>7.2f} | {cumulative / total * 100:>5.1f} % cum")
    print()
    kinds = ", ".join(f"{kind} {n / turns:.2f}" for kind, n in sorted(statements.items()))
    commits = statements["COMMIT"] / turns
    print(f"SQL statements per turn (trace callback): {kinds}; transactions {commits:.2f}")


def floor_transactions(path: Path, count: int, start: int = 0) -> None:
    """``count`` raw WAL transactions of 2 INSERTs (the floor of ``durable_vs_floor.py``)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE IF NOT EXISTS m (s TEXT, n INTEGER, json TEXT, PRIMARY KEY (s, n))")
    for n in range(start, start + count):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO m VALUES ('bench', ?, ?)", (2 * n, '{"role":"user"}'))
        conn.execute("INSERT INTO m VALUES ('bench', ?, ?)", (2 * n + 1, '{"role":"assistant"}'))
        conn.execute("COMMIT")
    conn.close()


def strace_child(root: Path, turns: int) -> None:
    """Run under strace: warm up, marker, ``turns`` turns, marker, as many floor ones, marker."""
    floor_transactions(root / "floor.db", WARMUP)
    with SqliteStore(root / "strace.db") as store:
        agent = create_agent(provider=FunctionProvider(lambda _: "Sunny."), store=store)
        session = agent.session("bench")
        for _ in range(WARMUP):
            session.send("weather?")
        marker = os.open(root / MARKER, os.O_RDWR | os.O_CREAT, 0o600)
        os.fsync(marker)
        for _ in range(turns):
            session.send("weather?")
        os.fsync(marker)
        agent.close()
    os.fsync(marker)
    floor_transactions(root / "floor.db", turns, start=WARMUP)
    os.fsync(marker)
    os.close(marker)


_CALL = re.compile(r"^\d+\s+(?:<\.\.\. )?(?P<name>[a-z0-9_]+)[( ]")


def syscalls(root: Path, turns: int) -> None:
    strace = shutil.which("strace")
    if strace is None:
        print(
            "system calls per turn: not counted (strace is not installed: apt-get install strace)"
        )
        return
    out = root / "strace.txt"
    command = [strace, "-f", "-qq", "-y", "-o", str(out), sys.executable, __file__]
    command += ["--strace-child", str(root), str(turns)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0 or not out.exists():
        print(f"system calls per turn: not counted (strace failed: {done.stderr.strip()[-300:]})")
        return
    # sections between markers: 1 = the turns, 3 = the floor transactions
    counts = [collections.Counter[str]() for _ in range(5)]
    files = [collections.Counter[str]() for _ in range(5)]
    markers = 0
    for line in out.read_text().splitlines():
        if MARKER in line and "fsync(" in line:
            markers += 1
            continue
        if markers not in (1, 3) or "resumed>" in line:
            continue
        found = _CALL.search(line)
        if found is None:
            continue
        counts[markers][found["name"]] += 1
        named = re.search(r'"(/[^"]*)"', line) or re.search(r"\((?:\d+)<(/[^>]*)>", line)
        if named is not None:
            files[markers][f"{found['name']} {re.sub(r'^.*/', '', named[1])}"] += 1
    if markers < 4:
        print("system calls per turn: not counted (the strace output has no markers)")
        return
    for section, what in ((1, "durable turn"), (3, "floor transaction")):
        total = sum(counts[section].values()) / turns
        print(f"system calls per {what} (strace -f, {turns} of them): {total:.1f}")
        print("  " + ", ".join(f"{k} {n / turns:.2f}" for k, n in counts[section].most_common()))
        top = files[section].most_common(12)
        print("  by file: " + ", ".join(f"{k} {n / turns:.2f}" for k, n in top))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer turns (a smoke run)")
    parser.add_argument("--turns", type=int, default=None, help=f"default {TURNS}")
    parser.add_argument("--strace-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.strace_child:
        strace_child(Path(args.strace_child[0]), int(args.strace_child[1]))
        return
    turns = args.turns or (QUICK_TURNS if args.quick else TURNS)
    print(f"profile of a durable SQLite turn (NORMAL, no tool); {machine()}")
    with tempfile.TemporaryDirectory(prefix="lousho-bench-") as tmp:
        root = Path(tmp)
        stats, statements, elapsed = profile(root, turns)
        print(f"{turns} turns, {elapsed / turns * 1e6:.0f} µs per turn under cProfile")
        print()
        print_profile(stats, statements, turns)
        print()
        syscalls(root, turns)
    print(f"ended at {machine()}")


if __name__ == "__main__":
    main()
