"""µs per durable turn (one tool call) vs the same turn without checkpoints, on SQLite.

Also counts commits per turn (checkpoint saves + the transcript append + the
checkpoint delete) and derives µs per commit. Transcript lengths 10 and 5,000:
the cost must stay flat.

Run: ``make bench`` or ``python benchmarks/durable_overhead.py``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from lousho_sessions import FunctionProvider, Message, ModelRequest, ToolCall, create_agent, tool
from lousho_sessions.sqlite import SqliteStore
from lousho_sessions.stores.base import AgentStore

ROUNDS = 150


@tool
def lookup(city: str) -> str:
    """Instant tool."""
    return "sunny"


def model(request: ModelRequest) -> Message:
    if request.messages[-1].role == "tool":
        return Message.assistant("It is sunny.")
    return Message.assistant("", tool_calls=[ToolCall("c1", "lookup", {"city": "Paris"})])


class Counting:
    """Counts calls that commit (checkpoint save/delete) on a real checkpoint store."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.commits = 0

    def save(self, turn_id: str, data: Any) -> None:
        self.commits += 1
        self.inner.save(turn_id, data)

    def delete(self, turn_id: str) -> None:
        self.commits += 1
        self.inner.delete(turn_id)

    def load(self, turn_id: str) -> Any:
        return self.inner.load(turn_id)

    def list(self, prefix: str = "") -> list[str]:
        return list(self.inner.list(prefix))


def measure(length: int, durable: bool, folder: Path) -> tuple[float, float]:
    store = SqliteStore(folder / f"bench-{length}-{durable}.db")
    pairs = [
        m for i in range(length // 2) for m in (Message.user(f"q{i}"), Message.assistant(f"a{i}"))
    ]
    store.sessions.save("bench", pairs)
    checkpoints = Counting(store.checkpoints) if durable else None
    parts = AgentStore(store.sessions, checkpoints, store.approvals)
    agent = create_agent(provider=FunctionProvider(model), tools=[lookup], store=parts)
    session = agent.session("bench")
    for _ in range(10):
        session.send("warm up")
    if checkpoints is not None:
        checkpoints.commits = 0
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter_ns()
        session.send("weather?")
        samples.append((time.perf_counter_ns() - start) / 1_000)
    commits = (checkpoints.commits / ROUNDS if checkpoints else 0.0) + 1  # + the transcript append
    session.close()
    store.close()
    return statistics.median(samples), commits


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(
            f"{'length':>7} | {'plain µs':>9} | {'durable µs':>10} | {'commits/turn':>12} | {'µs/extra commit':>15}"
        )
        for length in (10, 5_000):
            plain, _ = measure(length, False, folder)
            durable, commits = measure(length, True, folder)
            extra = (durable - plain) / max(commits - 1, 1)
            print(
                f"{length:>7} | {plain:>9.0f} | {durable:>10.0f} | {commits:>12.1f} | {extra:>15.0f}"
            )


if __name__ == "__main__":
    main()
