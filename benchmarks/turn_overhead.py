"""Median µs per ``session.send`` with an instant model and the memory store.

The cost must not grow with the transcript: the session keeps it in memory,
checks the store's revision, and appends the turn's new messages only.

Run: ``make bench`` or ``python benchmarks/turn_overhead.py``.
"""

from __future__ import annotations

import statistics
import time

from lousho_sessions import FunctionProvider, MemorySessionStore, Message, create_agent
from lousho_sessions.providers.base import ModelRequest

LENGTHS = (10, 1_000, 5_000)
ROUNDS = 400


def instant(request: ModelRequest) -> str:
    return "ok"


def measure(length: int) -> float:
    store = MemorySessionStore()
    pairs = [
        m for i in range(length // 2) for m in (Message.user(f"q{i}"), Message.assistant(f"a{i}"))
    ]
    store.save("bench", pairs)
    agent = create_agent(provider=FunctionProvider(instant))
    session = agent.session("bench", store=store)
    for _ in range(20):  # warm up: load, start the worker
        session.send("warm")
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter_ns()
        session.send("hello")
        samples.append((time.perf_counter_ns() - start) / 1_000)
    session.close()
    return statistics.median(samples)


def main() -> None:
    print(f"{'transcript length':>18} | {'median µs / send':>16}")
    results = {n: measure(n) for n in LENGTHS}
    for n, us in results.items():
        print(f"{n:>18} | {us:>16.1f}")
    print(f"ratio t(5000)/t(10): {results[5_000] / results[10]:.2f}")


if __name__ == "__main__":
    main()
