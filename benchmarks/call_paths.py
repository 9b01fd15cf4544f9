"""CPU µs per turn through each call path, with an instant model and the memory store.

Every path queues its turn on a lane and goes through the same session core
(``SessionLane``: the lane key, the re-entry check, stop, the end of the stream):
``session.send``, ``session.stream``, ``agent.send`` (a single send) and
``AsyncSession.send``. The figure is the process's CPU time (every thread) per turn,
less sensitive to a loaded machine than wall-clock time.

Run: ``python benchmarks/call_paths.py`` (all paths), or one path under callgrind to
count instructions, which a loaded machine does not change::

    valgrind --tool=callgrind python benchmarks/call_paths.py --path send --turns 200
    valgrind --tool=callgrind python benchmarks/call_paths.py --path send --turns 0

(the difference of the two counts over 200 is the instructions one turn costs).
"""

from __future__ import annotations

import argparse
import asyncio
import time

from lousho_sessions import FunctionProvider, create_agent
from lousho_sessions.aio import AsyncAgent
from lousho_sessions.providers.base import ModelRequest

PATHS = ("send", "stream", "single", "aio")


def instant(request: ModelRequest) -> str:
    return "ok"


def run(path: str, turns: int) -> float:
    """CPU µs per turn of ``turns`` turns through ``path`` (after 10 to warm up)."""
    agent = create_agent(provider=FunctionProvider(instant))
    session = agent.session("bench")
    for _ in range(10):  # load, start the worker
        session.send("warm")
    start = time.process_time()
    if path == "send":
        for _ in range(turns):
            session.send("hello")
    elif path == "stream":
        for _ in range(turns):
            for _event in session.stream("hello"):
                pass
    elif path == "single":
        for _ in range(turns):
            agent.send("hello")
    else:

        async def main() -> None:
            async_session = AsyncAgent(agent).session("bench-aio")
            for _ in range(turns):
                await async_session.send("hello")

        asyncio.run(main())
    spent = time.process_time() - start
    agent.close()
    return spent / max(turns, 1) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", choices=PATHS, help="one path (default: all)")
    parser.add_argument("--turns", type=int, default=2_000)
    args = parser.parse_args()
    print(f"{'path':>8} | {'CPU µs / turn':>13}")
    for path in [args.path] if args.path else PATHS:
        print(f"{path:>8} | {run(path, args.turns):>13.1f}")


if __name__ == "__main__":
    main()
