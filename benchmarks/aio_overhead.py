"""What the asyncio facade costs: µs per awaited ``send`` vs a sync ``send``, and loop lag.

1. An instant model and the memory store: the median µs of ``session.send()``
   and of ``await AsyncSession(session).send()``; the difference is what the
   facade adds (``asyncio.wrap_future`` and a ``call_soon_threadsafe`` wake-up).
   Target: under 50 µs.
2. 100 async sessions stream at once (each model streams 40 chunks, 5 ms apart:
   ~200 tokens/s a stream, some 15,000 events/s in all) while a ticker coroutine
   asks for 1 ms sleeps: the event-loop lag (how late each tick wakes),
   p50/p99/max. "cold": the 100 session worker threads start during the run
   (``Thread.start()`` waits for each new thread); "warm": they are running.
   On a 2-core machine most of the lag is GIL contention among the 100 worker
   threads; the same load read by threads through the sync API lags about as much.

Run: ``make bench`` or ``python benchmarks/aio_overhead.py``.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Iterator

from lousho_sessions import FunctionProvider, ModelRequest, create_agent, memory_store
from lousho_sessions.aio import AsyncSession

ROUNDS = 3_000
STREAMS = 100
CHUNKS = 40
CHUNK_EVERY = 0.005


def instant(request: ModelRequest) -> str:
    return "ok"


def send_cost() -> tuple[float, float]:
    agent = create_agent(provider=FunctionProvider(instant), store=memory_store())
    session = agent.session("sync-bench")
    for _ in range(200):  # warm up; clear now and then so transcripts stay short
        session.send("warm")
    session.clear()
    sync_samples = []
    for i in range(ROUNDS):
        start = time.perf_counter_ns()
        session.send("hello")
        sync_samples.append((time.perf_counter_ns() - start) / 1_000)
        if i % 500 == 499:
            session.clear()

    async def awaited() -> list[float]:
        wrapped = AsyncSession(agent.session("async-bench"))
        for _ in range(200):
            await wrapped.send("warm")
        await wrapped.clear()
        samples = []
        for i in range(ROUNDS):
            start = time.perf_counter_ns()
            await wrapped.send("hello")
            samples.append((time.perf_counter_ns() - start) / 1_000)
            if i % 500 == 499:
                await wrapped.clear()
        return samples

    async_samples = asyncio.run(awaited())
    agent.close()
    return statistics.median(sync_samples), statistics.median(async_samples)


def streaming_lag(warm: bool) -> tuple[float, float, float, int]:
    pace = threading.Event()  # never set: wait(timeout) paces the chunks

    def model(request: ModelRequest) -> Iterator[str] | str:
        if request.messages[-1].text == "warm up":
            return "ready"

        def chunks() -> Iterator[str]:
            for i in range(CHUNKS):
                pace.wait(CHUNK_EVERY)
                yield f"t{i} "

        return chunks()

    agent = create_agent(provider=FunctionProvider(model), store=memory_store())
    sessions = [AsyncSession(agent.session(f"s{n}")) for n in range(STREAMS)]

    async def stream(session: AsyncSession) -> int:
        events = 0
        async for _ in session.stream("go"):
            events += 1
        return events

    async def main() -> tuple[list[float], int]:
        if warm:  # start every session's worker thread before measuring
            await asyncio.gather(*(session.send("warm up") for session in sessions))
        lags: list[float] = []
        done = asyncio.Event()

        async def ticker() -> None:
            while not done.is_set():
                start = time.perf_counter()
                await asyncio.sleep(0.001)
                lags.append((time.perf_counter() - start - 0.001) * 1_000)

        tick = asyncio.create_task(ticker())
        counts = await asyncio.gather(*(stream(session) for session in sessions))
        done.set()
        await tick
        return lags, sum(counts)

    lags, events = asyncio.run(main())
    agent.close()
    lags.sort()
    return statistics.median(lags), lags[int(len(lags) * 0.99)], lags[-1], events


def main() -> None:
    sync_us, async_us = send_cost()
    print(f"{'instant send':<28} | {'median µs':>10}")
    print(f"{'session.send()':<28} | {sync_us:>10.1f}")
    print(f"{'await AsyncSession.send()':<28} | {async_us:>10.1f}")
    print(f"{'async adds':<28} | {async_us - sync_us:>10.1f}   (target < 50)")
    print()
    print(f"event-loop lag while {STREAMS} async sessions stream")
    print(f"{'workers':<8} | {'events':>7} | {'p50 ms':>8} | {'p99 ms':>8} | {'max ms':>8}")
    for warm in (False, True):
        p50, p99, worst, events = streaming_lag(warm)
        label = "warm" if warm else "cold"
        print(f"{label:<8} | {events:>7} | {p50:>8.2f} | {p99:>8.2f} | {worst:>8.2f}")


if __name__ == "__main__":
    main()
