"""The Flask example as gunicorn serves it in the tests: the demo model, 50 ms per call.

The delay keeps each worker process busy long enough that concurrent requests
spread over several processes, which must then share the SQLite store safely.
"""

from __future__ import annotations

from collections.abc import Iterator

from flask_app import create_app, default_store, refund_order

from lousho_sessions import AbortSignal, DemoProvider, ModelEvent, ModelRequest, create_agent


class ThinkingDemo:
    """The demo model, taking 50 ms to answer (sooner if aborted)."""

    name = "thinking-demo"

    def __init__(self) -> None:
        self.demo = DemoProvider()

    def stream(self, request: ModelRequest, signal: AbortSignal) -> Iterator[ModelEvent]:
        signal.wait(0.05)
        yield from self.demo.stream(request, signal)

    def close(self) -> None:
        self.demo.close()


app = create_app(
    create_agent(
        instructions="You are a shop assistant.",
        provider=ThinkingDemo(),
        tools=[refund_order],
        store=default_store(),
    )
)
