"""A traced durable turn in a real process (tracing tests).

``python trace_child.py start <db>`` runs a turn of session "traced" on the SQLite
store ``<db>``: the model asks for ``slow``, which prints the span context of the
turn's span as JSON (``{"trace_id": …, "span_id": …}``) and kills its own process
with SIGKILL, mid-turn. ``python trace_child.py resume <db>`` finishes the turn in a
new process and prints every span it exported as one JSON line each.
``python trace_child.py blocked`` runs a turn with ``opentelemetry`` made
unimportable and prints what it imported; ``lazy`` runs one with it importable but
not imported, and prints the ``opentelemetry`` modules loaded after it; ``global``
sets a global tracer provider, then makes an agent, and prints the spans' names.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from lousho_sessions import FunctionProvider, Message, ModelRequest, ToolCall, create_agent, tool


def model(request: ModelRequest) -> Message:
    if request.messages[-1].role == "user":
        return Message.assistant("", tool_calls=[ToolCall("call-1", "slow", {})])
    return Message.assistant("done")


def start(db: str) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    from lousho_sessions.sqlite import SqliteStore

    @tool
    def slow() -> str:
        """Dies before it answers."""
        parent = trace.get_current_span().parent  # type: ignore[attr-defined]
        print(json.dumps({"trace_id": parent.trace_id, "span_id": parent.span_id}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        return "never"

    agent = create_agent(
        provider=FunctionProvider(model), tools=[slow], store=SqliteStore(db),
        tracer_provider=TracerProvider(), name="child",
    )  # fmt: skip
    agent.session("traced").send("go")


def resume(db: str) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from lousho_sessions.sqlite import SqliteStore

    @tool
    def slow() -> str:
        """Answers this time."""
        return "ok"

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = create_agent(
        provider=FunctionProvider(model), tools=[slow], store=SqliteStore(db),
        tracer_provider=provider, name="child",
    )  # fmt: skip
    result = agent.session("traced").resume()
    assert result is not None and result.text == "done", result
    for span in exporter.get_finished_spans():
        print(json.dumps(_span(span)), flush=True)


def _span(span: Any) -> dict[str, Any]:
    return {
        "name": span.name,
        "trace_id": span.context.trace_id,
        "span_id": span.context.span_id,
        "parent": span.parent.span_id if span.parent else None,
        "links": [[link.context.trace_id, link.context.span_id] for link in span.links],
        "attributes": dict(span.attributes),
    }


class _Blocker:
    """A meta path finder that makes ``opentelemetry`` unimportable, as if not installed."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: Any = None) -> None:
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def lazy() -> None:
    """Installed but never imported by anyone: an agent does not import it either."""
    agent = create_agent(provider=FunctionProvider(lambda r: "hi"))
    assert agent.runner.telemetry is None and agent.send("hello").text == "hi"
    print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")))


def global_provider() -> None:
    """A global provider set before the agent is made is the one it traces to."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    agent = create_agent(provider=FunctionProvider(lambda r: "hi"), name="global")
    agent.send("hello")
    print(json.dumps(sorted(span.name for span in exporter.get_finished_spans())))


def blocked() -> None:
    sys.meta_path.insert(0, _Blocker())
    agent = create_agent(provider=FunctionProvider(lambda r: "hi"))
    assert agent.runner.telemetry is None
    assert agent.send("hello").text == "hi"
    try:
        create_agent(provider=FunctionProvider(lambda r: "hi"), tracer_provider=object())
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
    loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
    print(json.dumps({"loaded": loaded}))


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "start":
        start(sys.argv[2])
    elif mode == "resume":
        resume(sys.argv[2])
    elif mode == "lazy":
        lazy()
    elif mode == "global":
        global_provider()
    else:
        blocked()
