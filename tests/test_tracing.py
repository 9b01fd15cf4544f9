"""OpenTelemetry traces and metrics of turns (issue 17), with the SDK's in-memory exporter."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fork_server
import pytest
from helpers import calls
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider, SpanKind, StatusCode
from provider_server import ProviderServer, SSEReply, sse_events
from provider_wires import HttpProvider, Wire
from storekit import open_kit
from test_lease_lost import Takeover

from lousho_sessions import (
    Compaction,
    FunctionProvider,
    LeaseLostError,
    Message,
    ModelRequest,
    ProviderError,
    ScriptedProvider,
    Usage,
    create_agent,
    memory_store,
    tool,
)
from lousho_sessions.sqlite import SqliteStore
from lousho_sessions.stores.base import AgentStore

CHILD = str(Path(__file__).parent / "trace_child.py")


class Otel:
    """An SDK tracer provider and meter provider that keep what they record in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name.startswith(prefix)]

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]

    def agent(self, **kwargs: Any) -> Any:
        return create_agent(
            tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **kwargs
        )


@pytest.fixture
def otel() -> Iterator[Otel]:
    kit = Otel()
    yield kit
    kit.tracer_provider.shutdown()
    kit.meter_provider.shutdown()


@tool
def lookup(city: str) -> str:
    """Look up the weather."""
    return f"sunny in {city}"


def attrs_of(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_a_plain_turn_is_one_agent_span_and_one_chat_span(otel: Otel) -> None:
    reply = Message.assistant("hello", usage=Usage(7, 3))
    agent = otel.agent(provider=ScriptedProvider([reply]), model="demo", name="greeter")
    result = agent.session("s-plain").send("hi")
    [turn] = otel.named("invoke_agent")
    [chat] = otel.named("chat")
    assert turn.name == "invoke_agent greeter" and turn.kind is SpanKind.INTERNAL
    assert chat.name == "chat demo" and chat.kind is SpanKind.CLIENT
    assert chat.parent is not None and chat.parent.span_id == turn.context.span_id
    assert chat.context.trace_id == turn.context.trace_id
    t = attrs_of(turn)
    assert t["gen_ai.operation.name"] == "invoke_agent"
    assert t["gen_ai.conversation.id"] == "s-plain" and t["gen_ai.agent.name"] == "greeter"
    assert t["lousho.turn.id"] == "s-plain.turn-0" and t["lousho.run.id"] == result.run_id
    assert t["lousho.turn.attempt"] == 1 and t["lousho.turn.resumed"] is False
    assert t["lousho.finish_reason"] == "stop"
    c = attrs_of(chat)
    assert c["gen_ai.operation.name"] == "chat"
    assert c["gen_ai.provider.name"] == "scripted" and c["gen_ai.request.model"] == "demo"
    assert c["gen_ai.response.finish_reasons"] == ("stop",)
    assert (c["gen_ai.usage.input_tokens"], c["gen_ai.usage.output_tokens"]) == (7, 3)
    # no content unless asked for
    assert not any(k.startswith(("gen_ai.input", "gen_ai.output")) for k in c)
    tokens = {
        p.attributes["gen_ai.token.type"]: p.sum for p in otel.points("gen_ai.client.token.usage")
    }
    assert tokens == {"input": 7, "output": 3}
    [duration] = otel.points("gen_ai.client.operation.duration")
    assert duration.count == 1 and "error.type" not in duration.attributes


def test_turns_share_the_agents_span_attributes_and_keep_their_own(
    otel: Otel, caplog: pytest.LogCaptureFixture
) -> None:
    """What every span of the agent starts with is made once and shared: each span
    still has only its own values, and a turn without a session or fence gives the
    SDK no empty attribute (it would log each one it drops)."""
    answers = iter([Usage(1, 2), Usage(5, 6)])

    def model(request: ModelRequest) -> Message:
        return Message.assistant("ok", usage=next(answers))

    agent = otel.agent(provider=FunctionProvider(model), model="m1")
    with caplog.at_level("WARNING", logger="opentelemetry"):
        agent.send("one")  # no session: no conversation id, no lease
        agent.session("s-shared").send("two")
    assert [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry")] == []
    lone, durable = (attrs_of(s) for s in otel.named("invoke_agent"))
    assert not {"gen_ai.conversation.id", "lousho.lease.fence"} & set(lone)
    assert lone["gen_ai.request.model"] == durable["gen_ai.request.model"] == "m1"
    assert durable["gen_ai.conversation.id"] == "s-shared" and "lousho.turn.id" in durable
    assert lone["lousho.run.id"] != durable["lousho.run.id"]
    first, second = (attrs_of(s) for s in otel.named("chat"))
    assert (first["gen_ai.usage.input_tokens"], second["gen_ai.usage.input_tokens"]) == (1, 5)
    assert {k: v for k, v in first.items() if "usage" not in k} == {
        k: v for k, v in second.items() if "usage" not in k
    }
    assert first["gen_ai.request.model"] == "m1" and "lousho.operation" not in first
    agent.close()


def test_a_compactions_model_call_is_a_chat_span_of_its_own(otel: Otel) -> None:
    def model(request: ModelRequest) -> Message:
        if request.system and "summar" in request.system.lower():
            return Message.assistant("the gist", usage=Usage(11, 2))
        return Message.assistant("ok", usage=Usage(1, 1))

    agent = otel.agent(
        provider=FunctionProvider(model),
        model="demo",
        name="squeezer",
        compaction=Compaction(max_tokens=1, keep_last=1),
    )
    session = agent.session("s-compact")
    session.send("first")  # nothing to compact yet: one message
    session.send("second")  # compacts the first exchange before the turn
    result = session.compact(keep_last=1)
    summaries = [s for s in otel.named("chat") if attrs_of(s).get("lousho.operation")]
    assert len(summaries) == 2 and result.compacted
    turns = {s.context.span_id for s in otel.named("invoke_agent")}
    for span in summaries:
        a = attrs_of(span)
        assert span.name == "chat demo" and span.kind is SpanKind.CLIENT
        assert a["lousho.operation"] == "compaction" and a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "function" and a["gen_ai.request.model"] == "demo"
        assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (11, 2)
        assert span.parent is None or span.parent.span_id not in turns  # before, not in, a turn
    durations = otel.points("gen_ai.client.operation.duration")
    assert sum(p.count for p in durations) == len(otel.named("chat"))


def test_a_failed_compaction_call_marks_its_span(otel: Otel) -> None:
    def model(request: ModelRequest) -> Message:
        if len(request.messages) == 1 and "summar" in (request.system or "").lower():
            raise RuntimeError("down")
        return Message.assistant("ok")

    agent = otel.agent(provider=FunctionProvider(model), model="demo")
    session = agent.session("s-compact-fail")
    session.send("first")
    session.send("second")
    with pytest.raises(RuntimeError, match="down"):
        session.compact(keep_last=1)
    [span] = [s for s in otel.named("chat") if attrs_of(s).get("lousho.operation")]
    assert span.status.status_code is StatusCode.ERROR
    assert attrs_of(span)["error.type"] == "RuntimeError"


def test_a_tool_turn_traces_each_tool_run_under_the_turn(otel: Otel) -> None:
    provider = ScriptedProvider([calls(("lookup", {"city": "Paris"})), "It is sunny."])
    agent = otel.agent(provider=provider, tools=[lookup])
    agent.session("s-tool").send("weather?")
    [turn] = otel.named("invoke_agent")
    [run] = otel.named("execute_tool")
    assert len(otel.named("chat")) == 2
    assert run.name == "execute_tool lookup" and run.kind is SpanKind.INTERNAL
    assert run.parent is not None and run.parent.span_id == turn.context.span_id
    a = attrs_of(run)
    assert a["gen_ai.operation.name"] == "execute_tool" and a["gen_ai.tool.name"] == "lookup"
    assert a["gen_ai.tool.call.id"] == "c0"
    assert "gen_ai.tool.call.arguments" not in a and "gen_ai.tool.call.result" not in a
    first = attrs_of(otel.named("chat")[0])
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)


def test_a_failing_tool_marks_its_span_with_the_error(otel: Otel) -> None:
    @tool
    def broken() -> str:
        """Fails."""
        raise RuntimeError("boom")

    provider = ScriptedProvider([calls(("broken", {})), "sorry"])
    otel.agent(provider=provider, tools=[broken]).send("go")
    [run] = otel.named("execute_tool")
    assert attrs_of(run)["error.type"] == "RuntimeError"
    assert run.status.status_code is StatusCode.ERROR


def test_a_failed_model_call_sets_error_type_on_both_spans_and_the_duration(otel: Otel) -> None:
    def fail(request: ModelRequest) -> str:
        raise ConnectionError("refused")

    agent = otel.agent(provider=FunctionProvider(fail, name="flaky"), trace_content=True)
    with pytest.raises(ProviderError):
        agent.session("s-fail").send("hi")
    [turn] = otel.named("invoke_agent")
    [chat] = otel.named("chat")
    for span in (turn, chat):
        assert attrs_of(span)["error.type"] == "ProviderError"
        assert span.status.status_code is StatusCode.ERROR
        assert "refused" in (span.status.description or "")
    [duration] = otel.points("gen_ai.client.operation.duration")
    assert duration.attributes["error.type"] == "ProviderError"
    assert otel.points("gen_ai.client.token.usage") == []


def test_without_trace_content_error_messages_stay_out_of_span_statuses(otel: Otel) -> None:
    """``str(exc)`` quotes what the turn carried (tool arguments, user input, a server's
    reply): without ``trace_content`` a status description is the error's type only."""

    @tool
    def transfer(account: str) -> str:
        """Fails quoting its argument, as validation errors do."""
        raise ValueError(f"no account {account!r}")

    def model(request: ModelRequest) -> Message | str:
        if request.messages[-1].role == "user":
            return calls(("transfer", {"account": "IBAN-SECRET-1"}))
        raise ConnectionError(f"server said: {request.messages[-1].text}")

    agent = otel.agent(provider=FunctionProvider(model, name="m"), tools=[transfer])
    with pytest.raises(ProviderError):
        agent.session("s-secret").send("pay IBAN-SECRET-1 please")
    spans = otel.spans()
    assert {s.name.split()[0] for s in spans} >= {"invoke_agent", "chat", "execute_tool"}
    for span in spans:
        assert "IBAN-SECRET-1" not in (span.status.description or ""), span.name
        assert "IBAN-SECRET-1" not in json.dumps(attrs_of(span), default=str), span.name
    [run] = otel.named("execute_tool")
    assert run.status.status_code is StatusCode.ERROR
    assert run.status.description == "ValueError"
    [turn] = otel.named("invoke_agent")
    assert turn.status.description == "ProviderError (LOUSHO_PROVIDER_ERROR)"


def test_content_is_traced_only_when_opted_in(otel: Otel) -> None:
    provider = ScriptedProvider([calls(("lookup", {"city": "Oslo"})), "Sunny."])
    agent = otel.agent(
        provider=provider, tools=[lookup], instructions="Be brief.", trace_content=True
    )
    agent.session("s-content").send("weather in Oslo?")
    first, second = otel.named("chat")
    sent = json.loads(attrs_of(first)["gen_ai.input.messages"])
    assert sent == [{"role": "user", "parts": [{"type": "text", "content": "weather in Oslo?"}]}]
    assert json.loads(attrs_of(first)["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "Be brief."}
    ]
    [out] = json.loads(attrs_of(first)["gen_ai.output.messages"])
    assert out["parts"][0]["type"] == "tool_call" and out["parts"][0]["arguments"] == {
        "city": "Oslo"
    }
    [answer] = json.loads(attrs_of(second)["gen_ai.output.messages"])
    assert answer["parts"] == [{"type": "text", "content": "Sunny."}]
    [run] = otel.named("execute_tool")
    assert json.loads(attrs_of(run)["gen_ai.tool.call.arguments"]) == {"city": "Oslo"}
    assert attrs_of(run)["gen_ai.tool.call.result"] == "sunny in Oslo"


def test_an_approval_pause_and_its_resolution_are_one_trace_linked(otel: Otel) -> None:
    @tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        return f"paid {amount}"

    provider = ScriptedProvider([calls(("pay", {"amount": 5})), "Paid."])
    agent = otel.agent(provider=provider, tools=[pay], store=memory_store())
    paused = agent.session("s-approve").send("pay 5")
    assert paused.finish_reason == "awaiting-approval" and paused.approval_id is not None
    [first] = otel.named("invoke_agent")
    assert attrs_of(first)["lousho.finish_reason"] == "awaiting-approval"
    assert attrs_of(first)["lousho.approval.id"] == paused.approval_id
    done = agent.approvals.resolve(paused.approval_id, approved=True)
    assert done is not None and done.text == "Paid."
    _, second = otel.named("invoke_agent")
    assert second.context.trace_id == first.context.trace_id
    assert second.parent is not None and second.parent.span_id == first.context.span_id
    [link] = second.links
    assert (link.context.trace_id, link.context.span_id) == (
        first.context.trace_id,
        first.context.span_id,
    )
    a = attrs_of(second)
    assert a["lousho.turn.resumed"] is True and a["lousho.turn.attempt"] == 2
    assert a["lousho.turn.resumed_step"] == 1 and a["lousho.finish_reason"] == "stop"
    [run] = otel.named("execute_tool")
    assert run.parent is not None and run.parent.span_id == second.context.span_id
    [resumed] = otel.points("lousho.turns.resumed")
    assert resumed.value == 1


def test_a_turn_killed_mid_turn_resumes_in_another_process_in_the_same_trace(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "traced.db")
    first = fork_server.run([CHILD, "start", db], capture_output=True, text=True, timeout=60)
    assert first.returncode == -9, first.stderr  # SIGKILL, inside the tool
    original = json.loads(first.stdout)
    store = SqliteStore(db)
    try:
        saved = store.checkpoints.load("traced.turn-0")
    finally:
        store.close()
    assert saved is not None
    trace_id, span_id = f"{original['trace_id']:032x}", f"{original['span_id']:016x}"
    assert saved["trace"]["traceparent"].startswith(f"00-{trace_id}-{span_id}-")
    second = fork_server.run([CHILD, "resume", db], capture_output=True, text=True, timeout=60)
    assert second.returncode == 0, second.stderr
    spans = [json.loads(line) for line in second.stdout.splitlines()]
    [turn] = [s for s in spans if s["name"] == "invoke_agent child"]
    assert turn["links"] == [[original["trace_id"], original["span_id"]]]
    assert turn["trace_id"] == original["trace_id"] and turn["parent"] == original["span_id"]
    a = turn["attributes"]
    assert a["lousho.turn.resumed"] is True and a["lousho.turn.attempt"] == 2
    assert a["lousho.turn.resumed_step"] == 1 and a["lousho.turn.id"] == "traced.turn-0"
    assert a["gen_ai.conversation.id"] == "traced" and isinstance(a["lousho.lease.fence"], int)
    assert {s["name"] for s in spans} == {
        "invoke_agent child",
        "execute_tool slow",
        "chat function",
    }
    assert all(s["trace_id"] == original["trace_id"] for s in spans)


def test_without_the_api_nothing_is_imported_and_turns_run() -> None:
    out = subprocess.run(
        [sys.executable, CHILD, "blocked"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    error, loaded = (json.loads(line) for line in out.stdout.splitlines())
    assert loaded == {"loaded": []}
    assert "LoushoError" in error["error"] and "lousho-sessions[otel]" in error["error"]


def test_an_agent_without_providers_does_not_import_the_api() -> None:
    out = subprocess.run(
        [sys.executable, CHILD, "lazy"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_a_global_provider_set_before_the_agent_is_made_is_used() -> None:
    out = subprocess.run(
        [sys.executable, CHILD, "global"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["chat function", "invoke_agent global"]


def test_no_provider_anywhere_means_no_telemetry_and_no_global_is_installed() -> None:
    from opentelemetry import metrics, trace

    before = (trace.get_tracer_provider(), metrics.get_meter_provider())
    assert create_agent(provider=ScriptedProvider(["x"])).runner.telemetry is None
    assert (
        create_agent(
            provider=ScriptedProvider(["x"]), tracer_provider=NoOpTracerProvider()
        ).runner.telemetry
        is None
    )
    otel = Otel()
    agent = otel.agent(provider=ScriptedProvider(["x"]))
    agent.send("hi")
    assert agent.runner.telemetry is not None
    assert (trace.get_tracer_provider(), metrics.get_meter_provider()) == before


def test_a_lost_lease_is_counted(otel: Otel, tmp_path: Path) -> None:
    kit = open_kit("sqlite", tmp_path)
    takeover = Takeover(kit)

    @tool
    def slow() -> str:
        """Loses the session while it runs."""
        takeover.take()
        return "done"

    provider = FunctionProvider(lambda r: calls(("slow", {})))
    agent = otel.agent(
        provider=provider,
        tools=[slow],
        store=AgentStore(kit.sessions, kit.checkpoints, kit.approvals),
    )
    try:
        with pytest.raises(LeaseLostError):
            agent.session("s1").send("mine")
    finally:
        agent.close()
        kit.close()
    [lost] = otel.points("lousho.leases.lost")
    assert lost.value == 1
    [turn] = otel.named("invoke_agent")
    assert attrs_of(turn)["error.type"] == "LeaseLostError"


def test_http_providers_report_the_response_model_and_cache_tokens(
    otel: Otel, wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    cached = {
        "openai": (b'"cached_tokens":0', b'"cached_tokens":200'),
        "responses": (b'"cached_tokens": 1024', b'"cached_tokens": 200'),
        "anthropic": (b'"cache_read_input_tokens":0', b'"cache_read_input_tokens":200'),
        "gemini": (b'"cachedContentTokenCount": 1024', b'"cachedContentTokenCount": 200'),
    }
    old, new = cached[wire.kind]
    events = [e.replace(old, new) for e in sse_events(wire.kind, "text")]
    assert any(new in e for e in events)
    server.reply(SSEReply(events))
    agent = otel.agent(provider=make())
    agent.send("hi")
    [chat] = otel.named("chat")
    a = attrs_of(chat)
    kind = {"responses": "openai"}.get(wire.kind, wire.kind)
    assert chat.name == "chat test-model" and a["gen_ai.provider.name"] == kind
    assert a["gen_ai.request.model"] == "test-model"
    served = {
        "openai": "gpt-4o-mini-2024-07-18",
        "responses": "gpt-4o-mini-2024-07-18",
        "anthropic": "claude-3-5-haiku-20241022",
        "gemini": "gemini-2.5-flash",
    }
    assert a["gen_ai.response.model"] == served[wire.kind]
    assert a["gen_ai.usage.cache_read.input_tokens"] == 200
    assert "gen_ai.usage.cache_creation.input_tokens" not in a  # zero: not reported


def test_a_sampled_out_turn_makes_no_child_spans_but_keeps_its_trace_context() -> None:
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    store = memory_store()
    saved: list[Any] = []

    @tool
    def peek() -> str:
        """Reads the turn's checkpoint while it runs."""
        assert store.checkpoints is not None
        saved.append(store.checkpoints.load("s-out.turn-0"))
        return "ok"

    provider_ = ScriptedProvider([calls(("peek", {})), "done"])
    agent = create_agent(provider=provider_, tools=[peek], store=store, tracer_provider=provider)
    assert agent.session("s-out").send("go").text == "done"
    assert exporter.get_finished_spans() == ()
    [checkpoint] = saved
    flags = checkpoint["trace"]["traceparent"].rsplit("-", 1)[1]
    assert int(flags, 16) & 1 == 0  # not sampled, and it says so: a resumed run is not either
    provider.shutdown()


def test_a_turn_span_is_a_child_of_the_callers_span(otel: Otel) -> None:
    """The turn runs on a worker thread in a copy of the caller's context: a request's
    span (web middleware, say) is the parent of the turn it sends."""
    tracer = otel.tracer_provider.get_tracer("app")
    agent = otel.agent(provider=ScriptedProvider(["hi"]))
    with tracer.start_as_current_span("POST /chat") as request:
        agent.session("s-request").send("hello")
    [turn] = otel.named("invoke_agent")
    assert turn.parent is not None and turn.parent.span_id == request.get_span_context().span_id
    assert turn.context.trace_id == request.get_span_context().trace_id


@pytest.mark.parametrize("traced", [False, True])
def test_a_golden_v1_checkpoint_resumes_with_or_without_a_trace_field(
    otel: Otel, traced: bool
) -> None:
    """No version bump: ``trace`` is optional in format 1. Without it a resumed turn
    starts a new trace; with it, the resumed span links to the span it names."""
    data = json.loads((Path(__file__).parent / "fixtures" / "checkpoint-v1.json").read_text())
    trace_id, span_id = 0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331
    if traced:
        data["trace"] = {"traceparent": f"00-{trace_id:032x}-{span_id:016x}-01", "attempt": 1}
    store = memory_store()
    assert store.checkpoints is not None
    store.checkpoints.save("golden.turn-0", data)
    agent = otel.agent(provider=ScriptedProvider(["It is sunny."]), tools=[lookup], store=store)
    result = agent.session("golden").resume()
    assert result is not None and result.text == "It is sunny."
    [turn] = otel.named("invoke_agent")
    a = attrs_of(turn)
    assert a["lousho.turn.resumed"] is True and a["lousho.turn.resumed_step"] == 1
    if traced:
        [link] = turn.links
        assert (link.context.trace_id, link.context.span_id) == (trace_id, span_id)
        assert turn.context.trace_id == trace_id and a["lousho.turn.attempt"] == 2
    else:
        assert turn.links == () and turn.parent is None and a["lousho.turn.attempt"] == 1


def _otel_helper() -> Any:
    from opentelemetry import context, trace

    from lousho_sessions.telemetry._context import Otel as _Otel

    return _Otel(context, trace)


@given(
    trace_id=st.integers(1, 2**128 - 1),
    span_id=st.integers(1, 2**64 - 1),
    flags=st.integers(0, 255),
)
def test_a_span_context_round_trips_through_the_checkpoint_field(
    trace_id: int, span_id: int, flags: int
) -> None:
    from opentelemetry.trace import SpanContext, TraceFlags

    from lousho_sessions.telemetry._context import restore as _restore
    from lousho_sessions.telemetry._context import traceparent as _traceparent

    context = SpanContext(trace_id, span_id, False, TraceFlags(flags))
    saved = json.loads(json.dumps(_traceparent(context, 3)))
    back = _restore(_otel_helper(), saved)
    assert (back.trace_id, back.span_id, back.trace_flags) == (trace_id, span_id, flags)
    assert back.is_remote and saved["attempt"] == 3


@given(
    st.dictionaries(
        st.sampled_from(["traceparent", "tracestate", "attempt"]),
        st.one_of(
            st.text(max_size=80),
            st.from_regex(r"00-[-+_0-9a-fA-F ]{32}-[-+_0-9a-f]{16}-[0-9a-f]{2}", fullmatch=True),
            st.integers(),
            st.none(),
            st.lists(st.integers()),
        ),
    )
)
def test_a_damaged_trace_field_never_stops_a_resume(saved: dict[str, Any]) -> None:
    """Whatever a checkpoint's ``trace`` holds, reading it gives a span context or None."""
    from lousho_sessions.telemetry._context import restore as _restore

    found = _restore(_otel_helper(), saved)
    assert found is None or (found.is_valid and 0 < found.trace_id < 2**128 and found.span_id > 0)
