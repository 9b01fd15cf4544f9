"""Recovering 1,000 abandoned turns on PostgreSQL with 1, 2 and 4 sweeper processes.

Each configuration first leaves ``--turns`` durable turns pending in one schema:
a process sends one turn per session, and its model fails with a transient error
(the turn stays pending from its checkpoint and its lease is let go, exactly as a
worker that died once its lease ran out). Then N sweeper processes, started and
ready before the clock starts, each call ``recovery.sweep(store, agent=...,
limit=--batch)`` until a sweep finds nothing. The sweepers' model waits
``--model-ms`` (default 1,000 ms: a real model call takes seconds, and waiting on it is
I/O, which more sweepers overlap; with 20 ms the sweep is CPU-bound and 2 CPUs cap any
speed-up near 1.2x) and appends the turn's session id to a log file: a session id found
there twice is a turn resumed twice, which must never happen. Every transcript is
checked to hold its finished turn exactly once.

Printed per N: wall time, turns/s, the speed-up over 1 sweeper, turns resumed twice
(from the model's log), outcomes the sweepers reported (``taken``: a turn another
sweeper claimed first, passed over for the next one), and the load average. ``sweep``
runs the up to ``--batch`` turns it claims at once, on the agent's session lanes, so one
sweeper already overlaps ``--batch`` model waits; N sweepers overlap N times as many, as
long as the CPUs keep up. ``--batch`` defaults to 50 so that 1,000 turns make whole
rounds for 1, 2 and 4 sweepers.

Needs the server of ``LOUSHO_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``); it works in a schema of its own,
dropped at the end. Run: ``python benchmarks/sweep.py [--quick]``.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

from lousho_sessions import FunctionProvider, Message, ModelRequest, ProviderError, create_agent
from lousho_sessions.postgres import PostgresStore
from lousho_sessions.recovery import stale_turns, sweep

URL = os.environ.get("LOUSHO_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/test"
TURNS = 1_000
SWEEPERS = (1, 2, 4)
WAIT = 600.0  # seconds any one configuration may take before the benchmark gives up


def machine() -> str:
    one, five, fifteen = os.getloadavg()
    return (
        f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1/5/15 min), {os.cpu_count()} CPUs"
    )


def open_store(schema: str, max_size: int = 4) -> PostgresStore:
    return PostgresStore(URL, schema=schema, min_size=1, max_size=max_size, lease_ttl=5.0)


# -- abandoning turns ------------------------------------------------------------------


def failing_model(request: ModelRequest) -> Message:
    raise RuntimeError("the worker died here")  # transient: the turn stays pending


def abandon(schema: str, prefix: str, turns: int) -> float:
    """Leave ``turns`` pending turns on sessions ``<prefix>-<n>``; the seconds it took."""
    started = time.monotonic()
    with open_store(schema, max_size=8) as store:
        agent = create_agent(provider=FunctionProvider(failing_model), store=store)

        def one(n: int) -> None:
            session = agent.session(f"{prefix}-{n}")
            with contextlib.suppress(ProviderError):  # the model failed: the turn stays pending
                session.send(f"{prefix}-{n} what is the weather?")
            session.close()

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(one, range(turns)))
        agent.close()
    return time.monotonic() - started


# -- the sweeper processes -------------------------------------------------------------


def sweeper_child(schema: str, log: str, model_ms: float, batch: int) -> None:
    """One sweeper: ready, wait for "go" on stdin, sweep until a sweep finds nothing."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    pause = threading.Event()

    def model(request: ModelRequest) -> Message:
        session = request.messages[0].text.split()[0]
        os.write(fd, f"{session} {os.getpid()}\n".encode())  # the side-effect log
        pause.wait(model_ms / 1000)  # the model call's latency
        return Message.assistant("Sunny.")

    outcomes: collections.Counter[str] = collections.Counter()
    with open_store(schema) as store:
        agent = create_agent(provider=FunctionProvider(model), store=store)
        print("ready", flush=True)
        sys.stdin.readline()
        started = time.monotonic()
        while True:
            swept = sweep(store, agent=agent, limit=batch)
            if not swept:
                break
            outcomes.update(turn.outcome for turn in swept)
        ended = time.monotonic()
        agent.close()
    os.close(fd)
    print(json.dumps({"started": started, "ended": ended, "outcomes": outcomes}), flush=True)


def run_sweepers(
    schema: str, log: Path, n: int, model_ms: float, batch: int
) -> tuple[float, collections.Counter[str]]:
    """Start ``n`` sweepers, wait until all are ready, let them go; seconds, outcomes."""
    command = [sys.executable, __file__, "--child", schema, str(log), str(model_ms), str(batch)]
    children = [
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(n)
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        go = time.monotonic()
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        reports = []
        for child in children:
            out, _ = child.communicate(timeout=WAIT)
            assert child.returncode == 0, f"a sweeper failed ({child.returncode})"
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    outcomes: collections.Counter[str] = collections.Counter()
    for report in reports:
        outcomes.update(report["outcomes"])
    return max(r["ended"] for r in reports) - go, outcomes


def listing(schema: str, batch: int) -> tuple[int, float]:
    """How many turns are pending, and the seconds one ``stale_turns(limit=batch)`` takes."""
    with open_store(schema) as store:
        pending = len(stale_turns(store, limit=10**9))
        started = time.monotonic()
        stale_turns(store, limit=batch)
        return pending, time.monotonic() - started


def check(schema: str, prefix: str, turns: int, log: Path) -> tuple[int, int]:
    """(turns resumed twice by the model's log, transcripts not holding exactly one turn)."""
    calls = collections.Counter(
        line.split()[0] for line in log.read_text().splitlines() if line.startswith(prefix + "-")
    )
    twice = sum(1 for count in calls.values() if count > 1)
    wrong = 0
    with open_store(schema) as store:
        for n in range(turns):
            messages = store.sessions.load(f"{prefix}-{n}") or []
            if [m.role for m in messages] != ["user", "assistant"]:
                wrong += 1
    return twice, wrong + (turns - len(calls))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few-second smoke run")
    parser.add_argument("--turns", type=int, default=None, help=f"default {TURNS}")
    parser.add_argument("--model-ms", type=float, default=None, help="model latency (default 1000)")
    parser.add_argument("--batch", type=int, default=None, help="sweep(limit=), default 50")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        schema, log, model_ms, batch = args.child
        sweeper_child(schema, log, float(model_ms), int(batch))
        return
    turns = args.turns or (40 if args.quick else TURNS)
    model_ms = args.model_ms if args.model_ms is not None else (5.0 if args.quick else 1000.0)
    counts = (1, 2) if args.quick else SWEEPERS
    args.batch = args.batch or (10 if args.quick else 50)
    schema = "bench_sweep_" + secrets.token_hex(4)
    print(f"recovering {turns} abandoned turns on PostgreSQL; {machine()}")
    print(f"model latency {model_ms:g} ms, sweep(limit={args.batch}) per call, schema {schema}")
    print(
        "the model's wait is I/O: the speed-up shows how sweepers overlap it while the CPUs "
        "keep up (--model-ms 20 makes the sweep CPU-bound)"
    )
    print()
    print(
        f"{'sweepers':>8} | {'seconds':>7} | {'turns/s':>7} | {'speed-up':>8} | "
        f"{'resumed twice':>13} | {'bad transcripts':>15} | outcomes"
    )
    base: float | None = None
    failed = False
    listed: tuple[int, float] | None = None
    try:
        with tempfile.TemporaryDirectory(prefix="lousho-bench-sweep-") as tmp:
            log = Path(tmp) / "model-calls.log"
            log.touch()
            for n in counts:
                prefix = f"n{n}"
                abandon(schema, prefix, turns)
                listed = listed or listing(schema, args.batch)
                seconds, outcomes = run_sweepers(schema, log, n, model_ms, args.batch)
                twice, wrong = check(schema, prefix, turns, log)
                rate = turns / seconds
                base = rate if base is None else base
                failed = failed or twice > 0 or wrong > 0
                shown = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
                print(
                    f"{n:>8} | {seconds:>7.2f} | {rate:>7.0f} | {rate / base:>7.2f}x | "
                    f"{twice:>13} | {wrong:>15} | {shown}   (load {os.getloadavg()[0]:.2f})"
                )
    finally:
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    ideal = f"{counts[-1]}x" if len(counts) > 1 else "-"
    print()
    if listed is not None:
        print(
            f"one stale_turns(limit={args.batch}) with {listed[0]} turns pending took "
            f"{listed[1]:.2f} s (each sweep lists before it claims)"
        )
    print(
        f"linear would be {ideal} at {counts[-1]} sweepers; the machine has {os.cpu_count()} CPUs"
    )
    if failed:
        sys.exit("FAILED: a turn was resumed twice, or a transcript is not complete")


if __name__ == "__main__":
    main()
