"""OpenTelemetry traces and metrics of turns, per the GenAI semantic conventions.

``Telemetry.build`` decides once per agent whether anything is traced or measured:
with no ``tracer_provider``/``meter_provider`` given it takes the global ones, and
with neither configured (or ``opentelemetry-api`` not installed, the ``otel``
extra) it returns ``None`` and the turn code skips every call here: one ``is None``
test per model call and per tool. ``opentelemetry`` is imported here only, and only
when an agent is made, and not even then when no provider is given and nothing has
imported it yet (so no global provider can be set). No global provider is ever
installed.

Spans: ``invoke_agent {name}`` (INTERNAL) per run of a turn, ``chat {model}``
(CLIENT) per model call and ``execute_tool {tool}`` (INTERNAL) per tool run, their
children. A turn's span context is kept in its checkpoint (``trace`` in the
checkpoint's fields, a W3C ``traceparent``) so the run that resumes it, in any
process, continues that trace and links to the original span.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .messages import Message, ToolCall, Usage

__all__ = ["ChatTrace", "Telemetry", "TurnTrace"]

#: The checkpoint field holding a turn's trace context (unknown fields round-trip,
#: so a release without tracing keeps it).
TRACE_FIELD = "trace"
#: A W3C traceparent of version 00: trace id, parent span id, flags, in lowercase hex.
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


class Telemetry:
    """An agent's tracer and instruments, made once by ``build``."""

    def __init__(
        self, otel: Any, tracer: Any, meter: Any, *, content: bool, name: str | None
    ) -> None:
        self.otel = otel  # the opentelemetry modules this needs, imported once
        self.tracer = tracer
        self.content = content
        self.agent_name = name
        self.token_usage = self.duration = self.resumed = self.leases_lost = None
        #: a model call's metric attribute sets by (provider, model, response model, error)
        self.metric_attributes: dict[tuple[Any, ...], tuple[dict[str, Any], ...]] = {}
        if meter is not None:
            self.token_usage = meter.create_histogram(
                "gen_ai.client.token.usage", unit="{token}", description="Tokens per model call"
            )
            self.duration = meter.create_histogram(
                "gen_ai.client.operation.duration", unit="s", description="Model call duration"
            )
            self.resumed = meter.create_counter(
                "lousho.turns.resumed", unit="{turn}", description="Turns resumed from a checkpoint"
            )
            self.leases_lost = meter.create_counter(
                "lousho.leases.lost", unit="{turn}", description="Turns ended by a lost lease"
            )

    @classmethod
    def build(
        cls,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        *,
        content: bool = False,
        name: str | None = None,
    ) -> Telemetry | None:
        """The agent's telemetry; ``None`` when nothing would be recorded.

        With no provider given and ``opentelemetry`` not imported yet, no global one
        can have been set: ``None`` without importing it.
        """
        if (
            tracer_provider is None
            and meter_provider is None
            and "opentelemetry" not in sys.modules
        ):
            return None
        try:
            from opentelemetry import context, metrics, trace
        except ImportError:
            if tracer_provider is not None or meter_provider is not None:
                from .errors import LoushoError

                raise LoushoError(
                    "tracer_provider/meter_provider need opentelemetry-api: "
                    "pip install 'lousho-sessions[otel]'"
                ) from None
            return None
        tracer = meter = None
        version = _version()
        tp = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        if not isinstance(tp, (trace.NoOpTracerProvider, trace.ProxyTracerProvider)):
            tracer = tp.get_tracer("lousho_sessions", version)
        mp = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        if not isinstance(mp, metrics.NoOpMeterProvider) and type(mp).__name__ != (
            "_ProxyMeterProvider"  # the API's default before a global one is set
        ):
            meter = mp.get_meter("lousho_sessions", version)
        if tracer is None and meter is None:
            return None
        otel = _Otel(context, trace)
        return cls(otel, tracer, meter, content=content, name=name)

    def turn(
        self,
        state: Any,
        *,
        resumed: bool,
        fence: int | None,
        provider: str,
        model: str | None,
        system: str | None,
    ) -> TurnTrace:
        """Start tracing one run of ``state``'s turn (a ``TurnState``)."""
        if resumed and self.resumed is not None:
            self.resumed.add(1, {"gen_ai.provider.name": provider})
        return TurnTrace(self, state, resumed, fence, provider, model, system)

    def compaction(self, messages: Any, *, provider: str, model: str | None) -> ChatTrace | None:
        """A compaction's model call: a ``chat`` span (``lousho.operation = compaction``)
        under the current span, as compaction runs before a turn; measured as any call."""
        return _Compaction(self, provider, model).chat(messages)

    def lease_lost(self, provider: str) -> None:
        if self.leases_lost is not None:
            self.leases_lost.add(1, {"gen_ai.provider.name": provider})


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lousho-sessions")
    except PackageNotFoundError:
        return None


class _Otel:
    """The parts of the API the spans use, looked up once per agent."""

    __slots__ = (
        "Link", "NonRecordingSpan", "SpanContext", "Status", "TraceFlags", "TraceState",
        "attach", "client", "detach", "error", "in_context", "internal",
    )  # fmt: skip

    def __init__(self, context: Any, trace: Any) -> None:
        self.attach, self.detach = context.attach, context.detach
        self.in_context = trace.set_span_in_context
        self.Link, self.NonRecordingSpan = trace.Link, trace.NonRecordingSpan
        self.SpanContext, self.TraceFlags, self.TraceState = (
            trace.SpanContext,
            trace.TraceFlags,
            trace.TraceState,
        )
        self.Status, self.error = trace.Status, trace.StatusCode.ERROR
        self.internal, self.client = trace.SpanKind.INTERNAL, trace.SpanKind.CLIENT


class TurnTrace:
    """The span of one run of a turn, and the spans of its model calls and tools."""

    #: more attributes of each ``chat`` span
    chat_attributes: Mapping[str, Any] = {}

    def __init__(
        self,
        telemetry: Telemetry,
        state: Any,
        resumed: bool,
        fence: int | None,
        provider: str,
        model: str | None,
        system: str | None,
    ) -> None:
        self.telemetry = telemetry
        self.provider = provider
        self.model = model
        self.system = system
        self.span: Any = None
        self.context: Any = None
        #: the turn's span records (is sampled): only then are its children made
        self.recording = False
        self._token: object = None
        otel, tracer = telemetry.otel, telemetry.tracer
        if tracer is None:
            return
        saved = state.extra.get(TRACE_FIELD) if resumed else None
        original = _restore(otel, saved) if isinstance(saved, Mapping) else None
        attempt = 1
        if original is not None and isinstance(saved, Mapping):
            before = saved.get("attempt")  # a checkpoint is data: trust nothing in it
            attempt = before + 1 if type(before) is int and before > 0 else 2
        name = telemetry.agent_name
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": provider,
            "lousho.run.id": state.run_id,
            "lousho.turn.attempt": attempt,
            "lousho.turn.resumed": resumed,
        }
        if name is not None:
            attributes["gen_ai.agent.name"] = name
        if state.session_id is not None:
            attributes["gen_ai.conversation.id"] = state.session_id
        if model is not None:
            attributes["gen_ai.request.model"] = model
        if state.turn_id is not None:
            attributes["lousho.turn.id"] = state.turn_id
        if fence is not None:
            attributes["lousho.lease.fence"] = fence
        if resumed:
            attributes["lousho.turn.resumed_step"] = state.steps
        parent = None
        links: tuple[Any, ...] = ()
        if original is not None:
            # the same trace as the run that started the turn, and a link to its span
            parent = otel.in_context(otel.NonRecordingSpan(original))
            links = (otel.Link(original, {"lousho.link": "resumed"}),)
        span = self.span = tracer.start_span(
            f"invoke_agent {name}" if name else "invoke_agent",
            context=parent,
            kind=otel.internal,
            attributes=attributes,
            links=links,
        )
        if original is None:  # this run started the turn: its context goes in the checkpoint
            state.extra[TRACE_FIELD] = _traceparent(span.get_span_context(), attempt)
        elif isinstance(saved, Mapping):
            state.extra[TRACE_FIELD] = {**saved, "attempt": attempt}
        self.context = otel.in_context(span)
        self._token = otel.attach(self.context)
        self.recording = span.is_recording()

    def chat(self, messages: Sequence[Message]) -> ChatTrace | None:
        """Start tracing one model call with ``messages`` sent; None: nothing to record."""
        if not self.recording and self.telemetry.duration is None:
            return None
        return ChatTrace(self, messages)

    def tool(self, call: ToolCall, run: Callable[[], str]) -> Callable[[], str]:
        """``run`` (a tool's job) traced as ``execute_tool``, on whichever thread runs it."""
        if not self.recording:
            return run
        otel, tracer, parent = self.telemetry.otel, self.telemetry.tracer, self.context
        content = self.telemetry.content

        def traced() -> str:
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": call.name,
                "gen_ai.tool.call.id": call.id,
                "gen_ai.tool.type": "function",
            }
            if content:
                attributes["gen_ai.tool.call.arguments"] = _json(call.arguments)
            span = tracer.start_span(
                f"execute_tool {call.name}",
                context=parent,
                kind=otel.internal,
                attributes=attributes,
            )
            token = otel.attach(otel.in_context(span))
            try:
                output = run()
            except BaseException as exc:
                otel.detach(token)
                _fail(otel, span, exc)
                span.end()
                raise
            otel.detach(token)
            if content:
                span.set_attribute("gen_ai.tool.call.result", output)
            span.end()
            return output

        return traced

    def end(self, result: Any = None, error: BaseException | None = None) -> None:
        """End the turn's span with its ``ExecutionResult``, or the error it raised."""
        span, otel = self.span, self.telemetry.otel
        if span is None:
            return
        recording, self.span, self.recording = self.recording, None, False
        otel.detach(self._token)
        if not recording:
            pass
        elif error is not None:
            _fail(otel, span, error)
        elif result is not None:
            usage = result.usage
            attributes = {
                "lousho.finish_reason": result.finish_reason,
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
            }
            if result.approval_id:
                attributes["lousho.approval.id"] = result.approval_id
            span.set_attributes(attributes)
        span.end()


class _Compaction:
    """What a ``ChatTrace`` reads of its turn, for a model call made outside any turn."""

    __slots__ = ("context", "model", "provider", "recording", "system", "telemetry")
    chat_attributes: Mapping[str, Any] = {"lousho.operation": "compaction"}

    def __init__(self, telemetry: Telemetry, provider: str, model: str | None) -> None:
        self.telemetry, self.provider, self.model = telemetry, provider, model
        self.context = self.system = None  # the current context; not the agent's system
        self.recording = telemetry.tracer is not None  # the span itself says if it samples

    def chat(self, messages: Sequence[Message]) -> ChatTrace | None:
        if not self.recording and self.telemetry.duration is None:
            return None
        return ChatTrace(self, messages)


class ChatTrace:
    """One model call: its span and its measurements."""

    __slots__ = ("_token", "span", "started", "turn")

    def __init__(self, turn: TurnTrace | _Compaction, messages: Sequence[Message]) -> None:
        self.turn = turn
        telemetry = turn.telemetry
        self.started = time.perf_counter() if telemetry.duration is not None else 0.0
        self.span: Any = None
        self._token: object = None
        if not turn.recording:
            return
        otel = telemetry.otel
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": turn.provider,
            **turn.chat_attributes,
        }
        if turn.model:
            attributes["gen_ai.request.model"] = turn.model
        if telemetry.content:
            attributes["gen_ai.input.messages"] = _json([_gen_ai_message(m) for m in messages])
            if turn.system:
                attributes["gen_ai.system_instructions"] = _json(
                    [{"type": "text", "content": turn.system}]
                )
        span = self.span = telemetry.tracer.start_span(
            f"chat {turn.model or turn.provider}",
            context=turn.context,
            kind=otel.client,
            attributes=attributes,
        )
        self._token = otel.attach(otel.in_context(span))

    def end(self, response: Any = None, error: BaseException | None = None) -> None:
        """End the call: its ``ModelResponse`` (``None``: dropped, steered), or its error."""
        telemetry, span = self.turn.telemetry, self.span
        usage: Usage | None = None
        if response is not None:
            usage = response.usage
            if usage == Usage() and response.message.usage is not None:
                usage = response.message.usage
        if telemetry.duration is not None:
            self._measure(response, usage, error)
        if span is None:
            return
        otel = telemetry.otel
        otel.detach(self._token)
        if error is not None:
            _fail(otel, span, error)
        elif response is None:
            span.set_attribute("lousho.steered", True)
        else:
            usage = usage or Usage()
            attributes: dict[str, Any] = {
                "gen_ai.response.finish_reasons": (response.finish_reason,),
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
            }
            if response.model:
                attributes["gen_ai.response.model"] = response.model
            if usage.extra:
                for key in ("cache_read", "cache_creation"):
                    value = usage.extra.get(f"{key}_input_tokens")
                    if isinstance(value, int) and value:
                        attributes[f"gen_ai.usage.{key}.input_tokens"] = value
            if telemetry.content:
                out = _gen_ai_message(response.message)
                out["finish_reason"] = response.finish_reason
                attributes["gen_ai.output.messages"] = _json([out])
            span.set_attributes(attributes)
        span.end()

    def _measure(self, response: Any, usage: Usage | None, error: BaseException | None) -> None:
        telemetry, turn = self.turn.telemetry, self.turn
        key = (
            turn.provider,
            turn.model,
            response.model if response is not None else None,
            _error_type(error) if error is not None else None,
        )
        sets = telemetry.metric_attributes.get(key)
        if sets is None:
            sets = _metric_attributes(*key)
            if len(telemetry.metric_attributes) < 256:  # a bound, whatever the provider says
                telemetry.metric_attributes[key] = sets
        assert telemetry.duration is not None and telemetry.token_usage is not None
        telemetry.duration.record(time.perf_counter() - self.started, sets[0])
        if usage is not None:
            telemetry.token_usage.record(usage.input_tokens, sets[1])
            telemetry.token_usage.record(usage.output_tokens, sets[2])


def _metric_attributes(
    provider: str, model: str | None, response_model: str | None, error: str | None
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The attribute sets of a model call's duration and its input and output tokens
    (made once per distinct set: the SDK looks its aggregation up by them)."""
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider}
    if model:
        attributes["gen_ai.request.model"] = model
    if response_model:
        attributes["gen_ai.response.model"] = response_model
    if error is not None:
        attributes["error.type"] = error
    return (
        attributes,
        {**attributes, "gen_ai.token.type": "input"},
        {**attributes, "gen_ai.token.type": "output"},
    )


def _traceparent(context: Any, attempt: int) -> dict[str, Any]:
    """A span context as the W3C trace context headers say it, and the run's attempt."""
    ids = f"{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    saved: dict[str, Any] = {"traceparent": f"00-{ids}", "attempt": attempt}
    state = context.trace_state
    if state:
        saved["tracestate"] = state.to_header()
    return saved


def _restore(otel: Any, saved: Mapping[str, Any]) -> Any:
    """The span context kept in a checkpoint; None if there is none or it is unreadable."""
    found = _TRACEPARENT.fullmatch(str(saved.get("traceparent") or ""))
    if found is None:
        return None
    trace_id, span_id, flags = (int(part, 16) for part in found.groups())
    header = saved.get("tracestate")
    state = otel.TraceState.from_header([header]) if isinstance(header, str) and header else None
    context = otel.SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=otel.TraceFlags(flags), trace_state=state
    )
    return context if context.is_valid else None


def _fail(otel: Any, span: Any, error: BaseException) -> None:
    span.set_attribute("error.type", _error_type(error))
    span.set_status(otel.Status(otel.error, str(error)))


def _error_type(error: BaseException) -> str:
    return type(error).__qualname__


def _gen_ai_message(message: Message) -> dict[str, Any]:
    """``message`` in the GenAI conventions' message shape (role and parts)."""
    parts: list[dict[str, Any]] = []
    if message.role == "tool":
        parts.append(
            {"type": "tool_call_response", "id": message.tool_call_id, "response": message.text}
        )
    else:
        if message.text:
            parts.append({"type": "text", "content": message.text})
        parts.extend(
            {"type": "tool_call", "id": c.id, "name": c.name, "arguments": dict(c.arguments)}
            for c in message.tool_calls
        )
    return {"role": message.role, "parts": parts}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=_plain)


def _plain(value: Any) -> Any:
    """Frozen mappings and sequences (tool arguments) as JSON sees them; else their text."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (tuple, frozenset)):
        return list(value)
    return str(value)
