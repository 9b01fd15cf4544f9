"""Turns/s and p50/p99 of 1, 2, 4 and 8 processes sending on one SqliteStore file.

Each process (a real one, started with ``multiprocessing``'s "spawn") opens the
same database, sends one turn to warm up, waits at a barrier, then sends
``--sends`` turns (default 100) with an instant model, checkpoints on. Two
layouts: every process on a session id of its own ("distinct"), and all on one
shared id ("shared"), where turns queue on the session's turn lock and each
process reloads the transcript another one changed. Turns/s is all sends ÷ (last
end - first start); the ratio is to one process in the same layout. The issue's
targets for "shared": 8 processes ≥ 0.8 x one process's turns/s, p99 ≤ 10 x p50.

On "shared" the transcript grows by 2 messages per send across all processes, so
the 8-process run also reloads longer transcripts; the 1-process run never reloads.

Run: ``python benchmarks/multiprocess.py [--quick]`` (or ``make bench``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from lousho_sessions import FunctionProvider, ModelRequest, create_agent
from lousho_sessions.sqlite import SqliteStore

PROCESSES = (1, 2, 4, 8)
SENDS = 100
QUICK_SENDS = 20


def machine() -> str:
    one, five, fifteen = os.getloadavg()
    return (
        f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1/5/15 min), {os.cpu_count()} CPUs"
    )


def instant(request: ModelRequest) -> str:
    return "ok"


def sender(path: str, session_id: str, sends: int, barrier: Barrier, results: Any) -> None:
    """One process: warm up, wait for the others, send ``sends`` turns, report the timings."""
    with SqliteStore(path) as store:
        agent = create_agent(provider=FunctionProvider(instant), store=store)
        session = agent.session(session_id)
        session.send("warm up")
        barrier.wait(timeout=300)
        latencies = []
        first = time.monotonic()
        for n in range(sends):
            start = time.monotonic()
            session.send(f"turn {n}")
            latencies.append(time.monotonic() - start)
        last = time.monotonic()
        agent.close()
    results.put((first, last, latencies))


def run(root: Path, layout: str, processes: int, sends: int) -> tuple[float, float, float]:
    """Turns/s, p50 ms and p99 ms of ``processes`` senders."""
    context = multiprocessing.get_context("spawn")
    path = str(root / f"{layout}-{processes}.db")
    SqliteStore(path).close()  # create and migrate before the race
    barrier = context.Barrier(processes)
    results = context.Queue()
    children = [
        context.Process(
            target=sender,
            args=(path, "shared" if layout == "shared" else f"p{n}", sends, barrier, results),
        )
        for n in range(processes)
    ]
    for child in children:
        child.start()
    reports = [results.get(timeout=600) for _ in children]
    for child in children:
        child.join(60)
        if child.exitcode != 0:
            raise SystemExit(f"a sender process failed (exit code {child.exitcode})")
    first = min(report[0] for report in reports)
    last = max(report[1] for report in reports)
    latencies = sorted(x for report in reports for x in report[2])
    p50 = latencies[len(latencies) // 2] * 1_000
    p99 = latencies[min(int(len(latencies) * 0.99), len(latencies) - 1)] * 1_000
    return len(latencies) / (last - first), p50, p99


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sends (a smoke run)")
    parser.add_argument("--sends", type=int, default=None, help=f"per process (default {SENDS})")
    args = parser.parse_args()
    sends = args.sends or (QUICK_SENDS if args.quick else SENDS)
    print(f"processes sending on one SqliteStore file; {machine()}")
    print(f"{sends} sends per process, instant model, checkpoints on")
    print()
    print(
        f"{'ids':<8} | {'processes':>9} | {'turns/s':>8} | {'÷ 1 proc':>8} | {'p50 ms':>7} |"
        f" {'p99 ms':>7} | {'p99/p50':>7} | load"
    )
    with tempfile.TemporaryDirectory(prefix="lousho-bench-") as tmp:
        for layout in ("distinct", "shared"):
            alone = 0.0
            for processes in PROCESSES:
                rate, p50, p99 = run(Path(tmp), layout, processes, sends)
                alone = alone or rate
                print(
                    f"{layout:<8} | {processes:>9} | {rate:>8.0f} | {rate / alone:>8.2f} |"
                    f" {p50:>7.2f} | {p99:>7.2f} | {p99 / p50:>7.1f} | {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    print(f"ended at {machine()}")


if __name__ == "__main__":
    main()
