"""Starting many cold sessions from asyncio: how long the event loop is blocked.

1. N sessions that have never run (no worker yet) each get one
   ``await AsyncSession.send()`` at once, from one coroutine, while a ticker
   coroutine asks for 1 ms sleeps. Every model call waits until all N turns have
   reached the model, so N turns are live together. Reported: how long the loop
   spent queueing the N sends (the first step of each task runs on the loop), the
   worst tick lag, the time until every turn had reached the model, and the
   threads alive while they wait. Target: queueing a send costs the loop tens of
   µs, whatever N and however many threads are starting — a thread start must not
   happen on the loop's thread, nor under a lock the loop waits for.
2. 1,000 stateless ``agent.send()`` calls one after another: the threads of ours
   alive afterwards (bounded: idle threads are reused, not one left per call), and
   none after ``agent.close()``.

Run: ``python benchmarks/cold_sessions.py`` (1,000 and 10,000 sessions) or
``--quick`` (1,000 only).
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time

from lousho_sessions import FunctionProvider, ModelRequest, create_agent, memory_store
from lousho_sessions.aio import AsyncSession


def ours() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("lousho-"))


async def cold_start(n: int) -> None:
    reached = threading.Semaphore(0)
    gate = threading.Event()

    def model(request: ModelRequest) -> str:
        reached.release()
        gate.wait(120)
        return "ok"

    agent = create_agent(provider=FunctionProvider(model), store=memory_store())
    sessions = [AsyncSession(agent.session(f"cold-{i}")) for i in range(n)]
    lags: list[float] = []
    ticking = True

    async def ticker() -> None:
        while ticking:
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - start - 0.001)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    queued_at = time.perf_counter()
    tasks = [asyncio.create_task(s.send("hi")) for s in sessions]
    await asyncio.sleep(0)  # the loop runs the first step of every task: each queues its turn
    queued = time.perf_counter() - queued_at

    def all_reached() -> None:
        for _ in range(n):
            if not reached.acquire(timeout=300):
                raise RuntimeError("a turn did not reach the model within 300 s")

    await asyncio.to_thread(all_reached)
    started = time.perf_counter() - queued_at
    alive = ours()
    gate.set()
    results = await asyncio.gather(*tasks)
    finished = time.perf_counter() - queued_at
    ticking = False
    await tick
    assert all(r.text == "ok" for r in results)
    close_at = time.perf_counter()
    await asyncio.to_thread(agent.close)
    closed = time.perf_counter() - close_at
    print(
        f"{n:>6} cold sessions: loop busy queueing {queued * 1000:8.1f} ms "
        f"({queued / n * 1e6:5.1f} µs a send), worst tick lag {max(lags) * 1000:8.1f} ms, "
        f"all at the model after {started:6.2f} s ({alive} threads), done after {finished:6.2f} s, "
        f"close {closed:5.2f} s, threads left {ours()}"
    )


def stateless_sends(n: int) -> None:
    agent = create_agent(provider=FunctionProvider(lambda request: "ok"))
    before = ours()
    for _ in range(n):
        agent.send("hi")
    after = ours()
    agent.close()
    print(
        f"{n:>6} stateless agent.send(): threads of ours before {before}, after {after}, "
        f"after agent.close() {ours()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 sessions only")
    args = parser.parse_args()
    for n in (1_000,) if args.quick else (1_000, 10_000):
        asyncio.run(cold_start(n))
    stateless_sends(1_000)


if __name__ == "__main__":
    main()
