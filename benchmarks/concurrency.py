"""Turns/s and p50/p99 latency of many concurrent sessions whose model takes 50 ms.

Each of 100, then 1,000, sessions sends turn after turn (a closed loop: the next
``send`` starts when the last returns) for a fixed time; the turns that end
inside that window are counted (turns/s) and their latencies ranked (p50/p99).
The model waits 50 ms (``Event.wait`` with a timeout: the simulated model
latency) and answers. Run
from sync threads (one client thread per session, calling ``session.send``) and
from asyncio (one task per session on one loop, ``await AsyncSession.send``),
on the memory store and on one SqliteStore file (checkpoints on, as in
production). Every session sends one turn before the clock starts, so worker
start-up is not timed.

At 50 ms per turn the ideal is 20 turns/s per session: 2,000 turns/s at 100
sessions, 20,000 at 1,000. The figure to watch is the ratio 1,000 ÷ 100 of turns/s
(the issue's target: ≥ 0.8, i.e. throughput does not fall with more sessions).
On a small machine the 1,000-session rows are bound by CPU (2,000 threads, one
GIL), not by the 50 ms model: compare them with the ideal column.

``--only aio/sqlite`` runs the rows whose ``client/store/sessions`` contain the text.

Run: ``python benchmarks/concurrency.py [--quick]`` (or ``make bench``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
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
_NEVER = threading.Event()  # never set: waiting on it with a timeout is the model's latency


def machine() -> str:
    one, five, fifteen = os.getloadavg()
    return (
        f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1/5/15 min), {os.cpu_count()} CPUs"
    )


def slow_model(request: ModelRequest) -> str:
    _NEVER.wait(MODEL_LATENCY)
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


def run_threads(kind: str, count: int, duration: float, root: Path) -> Result:
    store = open_store(kind, root, f"threads-{count}")
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
        deadline = window[0] + duration
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
    return Result([x for mine in turns for x in mine], window[0], duration)


def run_aio(kind: str, count: int, duration: float, root: Path) -> Result:
    store = open_store(kind, root, f"aio-{count}")
    agent = create_agent(provider=FunctionProvider(slow_model), store=store)

    async def main() -> Result:
        sessions = [AsyncSession(agent.session(f"s{n}")) for n in range(count)]
        await asyncio.gather(*(session.send("warm up") for session in sessions))
        start = time.perf_counter()
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
    parser.add_argument("--quick", action="store_true", help="a shorter window (a smoke run)")
    parser.add_argument("--duration", type=float, default=None, help="seconds per configuration")
    parser.add_argument(
        "--only", default="", help="run the rows whose 'client/store/sessions' contains this"
    )
    args = parser.parse_args()
    duration = args.duration or (QUICK_DURATION if args.quick else DURATION)
    print(f"concurrent sessions, model latency {MODEL_LATENCY * 1000:.0f} ms; {machine()}")
    print(
        f"{duration:.1f} s measured per row; closed loop (each session sends when its last returns)"
    )
    print()
    print(
        f"{'client':<8} | {'store':<7} | {'sessions':>8} | {'turns/s':>8} | {'ideal':>6} |"
        f" {'p50 ms':>7} | {'p99 ms':>7} | load"
    )
    runners: dict[str, Callable[[str, int, float, Path], Result]] = {
        "threads": run_threads,
        "aio": run_aio,
    }
    rates: dict[tuple[str, str, int], float] = {}
    with tempfile.TemporaryDirectory(prefix="lousho-bench-") as tmp:
        for client, run in runners.items():
            for kind in ("memory", "sqlite"):
                for count in COUNTS:
                    if args.only not in f"{client}/{kind}/{count}":
                        continue
                    result = run(kind, count, duration, Path(tmp))
                    rates[client, kind, count] = result.rate
                    print(
                        f"{client:<8} | {kind:<7} | {count:>8,} | {result.rate:>8.0f} |"
                        f" {count / MODEL_LATENCY:>6.0f} | {result.percentile(0.5):>7.1f} |"
                        f" {result.percentile(0.99):>7.1f} | {os.getloadavg()[0]:.2f}",
                        flush=True,
                    )
    print()
    low, high = COUNTS
    print(f"turns/s at {high:,} ÷ turns/s at {low:,} sessions (target ≥ 0.8)")
    for client in runners:
        for kind in ("memory", "sqlite"):
            if (client, kind, high) not in rates or (client, kind, low) not in rates:
                continue
            ratio = rates[client, kind, high] / rates[client, kind, low]
            print(f"{client:<8} | {kind:<7} | {ratio:>5.2f}")
    print(f"ended at {machine()}")


if __name__ == "__main__":
    main()
