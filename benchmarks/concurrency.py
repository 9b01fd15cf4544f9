"""Turns/s and p50/p99 latency of many concurrent sessions whose model takes 50 ms.

Each of 100, then 1,000, sessions sends turn after turn (a closed loop: the next
``send`` starts when the last returns); the turns that end inside a measured
window are counted (turns/s) and their latencies ranked (p50/p99). The model
waits 50 ms (``time.sleep`` on the session's worker thread: each session's
model waits on its own, as a real model call does — waiting on one shared
``Event`` would queue 1,000 sessions on that event's lock) and answers. Run
from sync threads (one client thread per session, calling ``session.send``) and
from asyncio (one task per session on one loop, ``await AsyncSession.send``),
on the memory store and on one SqliteStore file (checkpoints on, as in
production). Every session sends one turn before the clock starts, so worker
start-up is not timed; then all start their loops at once, and the window opens
``--ramp`` seconds later (default 1): what is measured is the steady state, not
1,000 first turns started in the same instant (which end together, half a
second later on 2 CPUs, and would weigh on the 1,000-session row only).

At 50 ms per turn the ideal is 20 turns/s per session: 2,000 turns/s at 100
sessions, 20,000 at 1,000. The figure to watch is the ratio 1,000 ÷ 100 of turns/s
(the issue's target: ≥ 0.8, i.e. throughput does not fall with more sessions).
On a small machine the 1,000-session rows are bound by CPU (2,000 threads, one
GIL), not by the 50 ms model: compare them with the ideal column.

Single runs of the 1,000-session rows spread widely (±30% back to back), so
the whole sweep is repeated ``--repeats`` times (default 3), each time in a
rotated order; every ratio is taken within one repeat (its two rows seconds
apart), and the median over the repeats is printed with its range.

``--only aio/sqlite`` runs the rows whose ``client/store/sessions`` contain the text.

Run: ``python benchmarks/concurrency.py [--quick]`` (or ``make bench``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lousho_sessions import FunctionProvider, ModelRequest, create_agent, memory_store
from lousho_sessions.aio import AsyncSession
from lousho_sessions.sqlite import SqliteStore

MODEL_LATENCY = 0.05
COUNTS = (100, 1_000)
DURATION = 5.0  # seconds measured per configuration
QUICK_DURATION = 1.5
RAMP = 1.0  # seconds of the closed loop before the window opens
QUICK_RAMP = 0.5
REPEATS = 3


def machine() -> str:
    one, five, fifteen = os.getloadavg()
    return (
        f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1/5/15 min), {os.cpu_count()} CPUs"
    )


def slow_model(request: ModelRequest) -> str:
    time.sleep(MODEL_LATENCY)  # the model's response time (a benchmark, not a test)
    return "ok"


class Result:
    """The turns that ended inside the measured window: their latencies (seconds)."""

    def __init__(self, turns: list[tuple[float, float]], start: float, duration: float) -> None:
        end = start + duration
        self.latencies = sorted(latency for ended, latency in turns if start <= ended <= end)
        self.duration = duration

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.duration

    def percentile(self, p: float) -> float:
        if not self.latencies:
            return float("nan")
        return self.latencies[min(int(len(self.latencies) * p), len(self.latencies) - 1)] * 1_000


def open_store(kind: str, root: Path, tag: str) -> Any:
    return memory_store() if kind == "memory" else SqliteStore(root / f"{tag}.db")


def close_store(store: Any) -> None:
    if isinstance(store, SqliteStore):
        store.close()


def run_threads(kind: str, count: int, duration: float, ramp: float, root: Path) -> Result:
    store = open_store(kind, root, f"threads-{count}-{time.monotonic_ns()}")
    agent = create_agent(provider=FunctionProvider(slow_model), store=store)
    sessions = [agent.session(f"s{n}") for n in range(count)]
    ready = threading.Barrier(count + 1, timeout=300)
    go = threading.Event()
    turns: list[list[tuple[float, float]]] = [[] for _ in range(count)]
    window: list[float] = []

    def client(n: int) -> None:
        session = sessions[n]
        session.send("warm up")
        ready.wait()
        go.wait(300)
        deadline = window[0] + ramp + duration
        mine = turns[n]
        while True:
            start = time.perf_counter()
            if start >= deadline:
                break
            session.send("hello")
            end = time.perf_counter()
            mine.append((end, end - start))

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(count)]
    for thread in threads:
        thread.start()
    ready.wait()
    window.append(time.perf_counter())
    go.set()
    for thread in threads:
        thread.join(300)
    agent.close()
    close_store(store)
    return Result([x for mine in turns for x in mine], window[0] + ramp, duration)


def run_aio(kind: str, count: int, duration: float, ramp: float, root: Path) -> Result:
    store = open_store(kind, root, f"aio-{count}-{time.monotonic_ns()}")
    agent = create_agent(provider=FunctionProvider(slow_model), store=store)

    async def main() -> Result:
        sessions = [AsyncSession(agent.session(f"s{n}")) for n in range(count)]
        await asyncio.gather(*(session.send("warm up") for session in sessions))
        start = time.perf_counter() + ramp
        deadline = start + duration

        async def client(session: AsyncSession) -> list[tuple[float, float]]:
            mine: list[tuple[float, float]] = []
            while True:
                began = time.perf_counter()
                if began >= deadline:
                    return mine
                await session.send("hello")
                end = time.perf_counter()
                mine.append((end, end - began))

        results = await asyncio.gather(*(client(session) for session in sessions))
        return Result([x for mine in results for x in mine], start, duration)

    try:
        return asyncio.run(main())
    finally:
        agent.close()
        close_store(store)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter windows, one repeat")
    parser.add_argument("--duration", type=float, default=None, help="seconds measured per row")
    parser.add_argument(
        "--ramp", type=float, default=None, help="seconds of the loop before the window opens"
    )
    parser.add_argument("--repeats", type=int, default=None, help="sweeps (default 3)")
    parser.add_argument(
        "--only", default="", help="run the rows whose 'client/store/sessions' contains this"
    )
    args = parser.parse_args()
    duration = args.duration or (QUICK_DURATION if args.quick else DURATION)
    ramp = args.ramp if args.ramp is not None else (QUICK_RAMP if args.quick else RAMP)
    repeats = args.repeats or (1 if args.quick else REPEATS)
    print(f"concurrent sessions, model latency {MODEL_LATENCY * 1000:.0f} ms; {machine()}")
    print(
        f"{duration:.1f} s measured per row after {ramp:.1f} s of ramp; closed loop (each"
        f" session sends when its last returns); {repeats} repeat(s), rows in a rotated order"
    )
    print()
    print(
        f"{'repeat':>6} | {'client':<8} | {'store':<7} | {'sessions':>8} | {'turns/s':>8} |"
        f" {'ideal':>6} | {'p50 ms':>7} | {'p99 ms':>7} | load"
    )
    runners: dict[str, Callable[[str, int, float, float, Path], Result]] = {
        "threads": run_threads,
        "aio": run_aio,
    }
    rows = [
        (client, kind, count)
        for client in runners
        for kind in ("memory", "sqlite")
        for count in COUNTS
        if args.only in f"{client}/{kind}/{count}"
    ]
    rates: dict[tuple[str, str, int], list[float]] = {row: [] for row in rows}  # one a repeat
    with tempfile.TemporaryDirectory(prefix="lousho-bench-") as tmp:
        for repeat in range(repeats):
            shift = (repeat * 2) % max(len(rows), 1)  # rotate by a (client, store) pair
            for client, kind, count in rows[shift:] + rows[:shift]:
                result = runners[client](kind, count, duration, ramp, Path(tmp))
                rates[client, kind, count].append(result.rate)
                print(
                    f"{repeat + 1:>6} | {client:<8} | {kind:<7} | {count:>8,} | {result.rate:>8.0f} |"
                    f" {count / MODEL_LATENCY:>6.0f} | {result.percentile(0.5):>7.1f} |"
                    f" {result.percentile(0.99):>7.1f} | {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    print()
    low, high = COUNTS
    print(
        f"turns/s at {high:,} ÷ turns/s at {low:,} sessions, within each repeat (target ≥ 0.8):"
        " median (range); median turns/s"
    )
    for client, kind, count in rows:
        if count != low or (client, kind, high) not in rates:
            continue
        # the i-th rate of each row is from repeat i: a ratio within one repeat
        pairs = zip(rates[client, kind, high], rates[client, kind, low], strict=True)
        found = [h / n for h, n in pairs]
        spread = f"{min(found):.2f}-{max(found):.2f}" if len(found) > 1 else "one run"
        print(
            f"{client:<8} | {kind:<7} | {statistics.median(found):>5.2f} ({spread}) |"
            f" {statistics.median(rates[client, kind, low]):>6.0f} →"
            f" {statistics.median(rates[client, kind, high]):>6.0f}"
        )
    print(f"ended at {machine()}")


if __name__ == "__main__":
    main()
