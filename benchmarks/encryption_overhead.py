"""What encryption at rest adds to a durable SQLite turn: off, and on (``encryption=``).

The turn: ``session.send`` with an instant ``FunctionProvider`` that calls one tool,
then answers, on a ``SqliteStore`` given whole to the agent (durable: checkpoints on,
the store's default ``synchronous="NORMAL"``): per turn 4 messages sealed and
appended, 3 checkpoint records sealed and saved (SQLite keeps each sealed value as a
BLOB, its AES-GCM output as it is), opened where the turn reads them. Three
configurations, each its own agent and database file, timed turn by turn in
interleaved blocks so that a change in machine load hits all of them:

- ``off``: no ``encryption=``;
- ``off again``: a second such agent: its ratio to ``off`` is the noise of the measurement;
- ``encrypted``: ``encryption={"k1": <32 bytes>}`` (AES-256-GCM, keys derived per session).

The figure is a paired ratio: per round, a configuration's block median ÷ the ``off``
block median of that round; the median over rounds (median turn times printed beside
it). Each turn is timed by the wall clock and by the CPU time of the whole process (on
a loaded machine the wall clock also counts waits for a CPU). The target: ``encrypted``
at most 1.15 times ``off``.

Run: ``python benchmarks/encryption_overhead.py [--quick] [--turns N]``.

A figure that no load changes: instructions counted by callgrind. ``--only off`` (or
``--only encrypted``) runs one configuration alone, the warm-up then ``--turns`` turns,
and prints nothing; a turn's count is the difference of two runs over the difference of
their turns::

    for c in off encrypted; do for n in 20 220; do
      PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        python benchmarks/encryption_overhead.py --only $c --turns $n 2>&1 | grep Collected
    done; done
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BLOCK = 10  # configurations alternate in blocks of this many turns
WARMUP = 20
TARGET = 1.15


def make_turn(path: Path, encryption: Any) -> tuple[Callable[[], None], Callable[[], None]]:
    from lousho_sessions import FunctionProvider, Message, ModelRequest, ToolCall, create_agent
    from lousho_sessions import tool as make_tool
    from lousho_sessions.sqlite import SqliteStore

    @make_tool
    def lookup(city: str) -> str:
        """Instant tool."""
        return "sunny, 21 degrees, light wind from the west"

    def model(request: ModelRequest) -> Message:
        if request.messages[-1].role != "tool":
            return Message.assistant("", tool_calls=[ToolCall("c1", "lookup", {"city": "Paris"})])
        return Message.assistant("It is sunny in Paris today, 21 degrees with a light wind.")

    store = SqliteStore(path, encryption=encryption)
    agent = create_agent(provider=FunctionProvider(model), tools=[lookup], store=store)
    session = agent.session("bench")

    def turn() -> None:
        session.send("What is the weather in Paris today? I am planning a walk.")

    def close() -> None:
        session.close()
        agent.close()
        store.close()

    return turn, close


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer turns (a smoke run)")
    parser.add_argument("--turns", type=int, default=600, help="timed turns per configuration")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    parser.add_argument(
        "--only", choices=("off", "encrypted"), help="run this configuration alone, silently"
    )
    args = parser.parse_args()
    turns = 100 if args.quick else args.turns
    if args.only:
        keys = {"k1": bytes(range(32))} if args.only == "encrypted" else None
        with tempfile.TemporaryDirectory() as tmp:
            turn, close = make_turn(Path(tmp) / "only.db", keys)
            for _ in range(WARMUP + turns):
                turn()
            close()
        return
    one, five, fifteen = os.getloadavg()
    print(f"load average {one:.2f} / {five:.2f} / {fifteen:.2f}, {os.cpu_count()} CPUs")
    names = ("off", "off again", "encrypted")
    keys = {"k1": os.urandom(32)}
    with tempfile.TemporaryDirectory() as tmp:
        made = {
            name: make_turn(Path(tmp) / f"{i}.db", keys if name == "encrypted" else None)
            for i, name in enumerate(names)
        }
        for turn, _ in made.values():
            for _ in range(WARMUP):
                turn()
        wall: dict[str, list[list[float]]] = {name: [] for name in names}
        cpu: dict[str, list[list[float]]] = {name: [] for name in names}
        for round_ in range(turns // BLOCK):
            order = names if round_ % 2 == 0 else tuple(reversed(names))
            for name in order:
                turn = made[name][0]
                block_wall, block_cpu = [], []
                for _ in range(BLOCK):
                    w0, c0 = time.perf_counter(), time.process_time()
                    turn()
                    block_wall.append(time.perf_counter() - w0)
                    block_cpu.append(time.process_time() - c0)
                wall[name].append(block_wall)
                cpu[name].append(block_cpu)
        for _, close in made.values():
            close()
    results = {}
    for clock, data in (("wall", wall), ("cpu", cpu)):
        base = [statistics.median(b) for b in data["off"]]
        for name in names:
            medians = [statistics.median(b) for b in data[name]]
            ratio = statistics.median(m / o for m, o in zip(medians, base, strict=True))
            flat = [t for b in data[name] for t in b]
            results[(clock, name)] = (statistics.median(flat) * 1e3, ratio)
    print(
        f"\ndurable SQLite turn (one tool call), {turns} turns per configuration, blocks of {BLOCK}"
    )
    print(f"{'configuration':<12} {'wall ms':>8} {'ratio':>7} {'cpu ms':>8} {'ratio':>7}")
    for name in names:
        w_ms, w_ratio = results[("wall", name)]
        c_ms, c_ratio = results[("cpu", name)]
        print(f"{name:<12} {w_ms:8.3f} {w_ratio:7.3f} {c_ms:8.3f} {c_ratio:7.3f}")
    ratio = results[("wall", "encrypted")][1]
    verdict = "within" if ratio <= TARGET else "OVER"
    print(
        f"\nencryption costs {100 * (ratio - 1):+.1f}% of a durable SQLite turn "
        f"(wall clock, paired median ratio {ratio:.3f}): {verdict} the {TARGET:.2f} target"
    )
    if args.json:
        print(
            json.dumps({f"{c}/{n}": {"ms": v[0], "ratio": v[1]} for (c, n), v in results.items()})
        )


if __name__ == "__main__":
    main()
