"""Seconds for one durable turn whose model response asks for N tool calls, on SQLite.

Issue 10 measured 24 s for 1,000 calls and 58 s for 2,000: the whole turn was
saved after each tool result (O(n²)). Each result is now saved in a small record
(``_checkpoints.RESULTS_PER_RECORD`` results each): the time per call must stay
flat as N grows. ``Limits(max_tool_calls=5)`` on 1,000 calls must run 5 tools.

Run: ``python benchmarks/many_tool_calls.py``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from lousho_sessions import FunctionProvider, Limits, Message, ModelRequest, ToolCall, create_agent
from lousho_sessions import tool as make_tool
from lousho_sessions.sqlite import SqliteStore

ran: list[int] = []


@make_tool
def echo(v: int) -> str:
    """Instant tool."""
    ran.append(v)
    return str(v)


def provider(n: int) -> FunctionProvider:
    def model(request: ModelRequest) -> Message | str:
        if request.messages[-1].role == "user":
            calls = [ToolCall(f"c{i}", "echo", {"v": i}) for i in range(n)]
            return Message.assistant("", tool_calls=calls)
        return "done"

    return FunctionProvider(model)


def measure(n: int, folder: Path, limits: Limits | None = None) -> float:
    store = SqliteStore(folder / f"many-{n}-{limits is not None}.db")
    try:
        agent = create_agent(provider=provider(n), tools=[echo], store=store, limits=limits)
        started = time.perf_counter()
        agent.session("bench").send("go")
        return time.perf_counter() - started
    finally:
        store.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(f"{'calls':>6} {'seconds':>8} {'ms/call':>8}")
        for n in (250, 1000, 2000):
            seconds = measure(n, folder)
            print(f"{n:>6} {seconds:>8.2f} {seconds / n * 1000:>8.3f}")
        ran.clear()
        seconds = measure(1000, folder, Limits(max_tool_calls=5))
        print(f"1000 calls, max_tool_calls=5: {len(ran)} tools ran in {seconds:.2f} s")


if __name__ == "__main__":
    main()
