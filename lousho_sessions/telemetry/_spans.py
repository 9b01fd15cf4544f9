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
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..messages import NO_USAGE, Message, ToolCall, Usage
from ._context import TRACE_FIELD, Otel, restore, traceparent

__all__ = ["ChatTrace", "Telemetry", "TurnTrace"]


class Telemetry:
    """An agent's tracer and instruments, made once by ``build``.

    What is the same for every turn of the agent is made here, once: span names, the
    attributes every ``invoke_agent`` and ``chat`` span starts with, metric attribute
    sets. A turn adds only what is its own (ids, attempt, fence), and does nothing more
    than start its span when the sampler drops it.
    """

    def __init__(
        self,
        otel: Any,
        tracer: Any,
        meter: Any,
        *,
        content: bool,
        name: str | None,
        provider: str = "",
        model: str | None = None,
        system: str | None = None,
    ) -> None:
        self.otel = otel  # the opentelemetry modules this needs, imported once
        self.tracer = tracer
        self.content = content
        self.agent_name = name
        self.system = system
        self.token_usage = self.duration = self.resumed = self.leases_lost = None
        #: the provider attribute of the resumed and lost-lease counters
        self.counted = {"gen_ai.provider.name": provider}
        self.turn_name = f"invoke_agent {name}" if name else "invoke_agent"
        #: what every ``invoke_agent`` span starts with; a turn adds its own
        self.turn_attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": provider,
        }
        if name is not None:
            self.turn_attributes["gen_ai.agent.name"] = name
        if model is not None:
            self.turn_attributes["gen_ai.request.model"] = model
        self.calls = ModelCalls(provider, model)
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
        provider: str = "",
        model: str | None = None,
        system: str | None = None,
    ) -> Telemetry | None:
        """The agent's telemetry; ``None`` when nothing would be recorded.

        ``provider`` (``gen_ai.provider.name``), ``model`` and ``system`` are the agent's.
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
                from ..errors import LoushoError

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
        otel = Otel(context, trace)
        return cls(
            otel, tracer, meter, content=content, name=name, provider=provider, model=model,
            system=system,
        )  # fmt: skip

    def turn(self, state: Any, *, resumed: bool, fence: int | None) -> TurnTrace:
        """Start tracing one run of ``state``'s turn (a ``TurnState``)."""
        if resumed and self.resumed is not None:
            self.resumed.add(1, self.counted)
        return TurnTrace(self, state, resumed, fence)

    def compaction(self, messages: Any, *, provider: str, model: str | None) -> ChatTrace | None:
        """A compaction's model call: a ``chat`` span (``lousho.operation = compaction``)
        under the current span, as compaction runs before a turn; measured as any call."""
        if self.tracer is None and self.duration is None:
            return None
        calls = ModelCalls(provider, model, {"lousho.operation": "compaction"})
        # no context: the current one; no system: the agent's is not what this call sends
        return ChatTrace(self, calls, None, None, self.tracer is not None, messages)

    def lease_lost(self) -> None:
        if self.leases_lost is not None:
            self.leases_lost.add(1, self.counted)


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lousho-sessions")
    except PackageNotFoundError:
        return None


class ModelCalls:
    """What the ``chat`` spans and measurements of one provider and model share."""

    __slots__ = ("attributes", "measured", "model", "name", "provider")

    def __init__(
        self, provider: str, model: str | None, more: Mapping[str, Any] | None = None
    ) -> None:
        self.provider, self.model = provider, model
        self.name = f"chat {model or provider}"
        #: what every ``chat`` span starts with (given to the SDK as is: it copies it)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
        }
        if more:
            attributes.update(more)
        if model:
            attributes["gen_ai.request.model"] = model
        self.attributes = attributes
        #: metric attribute sets by (response model, error type), made once each
        self.measured: dict[tuple[str | None, str | None], tuple[dict[str, Any], ...]] = {}


class TurnTrace:
    """The span of one run of a turn, and the spans of its model calls and tools."""

    __slots__ = ("_token", "chats", "context", "recording", "span", "telemetry")

    def __init__(self, telemetry: Telemetry, state: Any, resumed: bool, fence: int | None) -> None:
        self.telemetry = telemetry
        self.span: Any = None
        self.context: Any = None
        #: the turn's span records (is sampled): only then are its children made
        self.recording = False
        self._token: object = None
        tracer = telemetry.tracer
        #: whether ``chat`` makes a ``ChatTrace``: something is recorded or measured
        self.chats = telemetry.duration is not None
        if tracer is None:
            return
        otel = telemetry.otel
        attributes = {  # one dict, made at once
            **telemetry.turn_attributes,
            "lousho.run.id": state.run_id,
            "lousho.turn.attempt": 1,
            "lousho.turn.resumed": resumed,
            "gen_ai.conversation.id": state.session_id,
            "lousho.turn.id": state.turn_id,
            "lousho.lease.fence": fence,
        }
        if state.session_id is None or state.turn_id is None or fence is None:
            attributes = {k: v for k, v in attributes.items() if v is not None}
        # the caller's context, looked up once (not by each API call given None)
        current = otel.current()
        if resumed:
            span = self._resume(telemetry, state, attributes)
        else:  # this run starts the turn: its context goes in the checkpoint
            span = tracer.start_span(
                telemetry.turn_name, context=current, kind=otel.internal, attributes=attributes
            )
            state.extra[TRACE_FIELD] = traceparent(span.get_span_context(), 1)
        self.span = span
        # current even when not recording: spans made under it (an instrumented HTTP
        # client's) follow the sampler's decision instead of starting traces of their own
        self.context = otel.in_context(span, current)
        self._token = otel.attach(self.context)
        if span.is_recording():
            self.recording = self.chats = True

    @staticmethod
    def _resume(telemetry: Telemetry, state: Any, attributes: dict[str, Any]) -> Any:
        """The span of a run that resumes a turn: in the trace its checkpoint names, a
        child of and linked to the span of the run that started it (else a new trace)."""
        otel, tracer = telemetry.otel, telemetry.tracer
        attributes["lousho.turn.resumed_step"] = state.steps
        saved = state.extra.get(TRACE_FIELD)
        original = restore(otel, saved) if isinstance(saved, Mapping) else None
        if original is None or not isinstance(saved, Mapping):
            span = tracer.start_span(
                telemetry.turn_name, context=None, kind=otel.internal, attributes=attributes
            )
            state.extra[TRACE_FIELD] = traceparent(span.get_span_context(), 1)
            return span
        before = saved.get("attempt")  # a checkpoint is data: trust nothing in it
        attempt = before + 1 if type(before) is int and before > 0 else 2
        attributes["lousho.turn.attempt"] = attempt
        span = tracer.start_span(
            telemetry.turn_name,
            context=otel.in_context(otel.NonRecordingSpan(original)),
            kind=otel.internal,
            attributes=attributes,
            links=(otel.Link(original, {"lousho.link": "resumed"}),),
        )
        state.extra[TRACE_FIELD] = {**saved, "attempt": attempt}
        return span

    def chat(self, messages: Sequence[Message]) -> ChatTrace | None:
        """Start tracing one model call with ``messages`` sent; None: nothing to record."""
        if not self.chats:
            return None
        telemetry = self.telemetry
        return ChatTrace(
            telemetry, telemetry.calls, self.context, telemetry.system, self.recording, messages
        )

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
            token = otel.attach(otel.in_context(span, parent))
            try:
                output = run()
            except BaseException as exc:
                otel.detach(token)
                _fail(otel, span, exc, content)
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
        span = self.span
        if span is None:
            return
        recording, self.span, self.recording, self.chats = self.recording, None, False, False
        otel = self.telemetry.otel
        otel.detach(self._token)
        if not recording:
            pass
        elif error is not None:
            _fail(otel, span, error, self.telemetry.content)
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


#: a response's ``usage`` when the provider reported none


class ChatTrace:
    """One model call: its span and its measurements."""

    __slots__ = ("_token", "calls", "span", "started", "telemetry")

    def __init__(
        self,
        telemetry: Telemetry,
        calls: ModelCalls,
        context: Any,
        system: str | None,
        recording: bool,
        messages: Sequence[Message],
    ) -> None:
        self.telemetry, self.calls = telemetry, calls
        self.started = time.perf_counter() if telemetry.duration is not None else 0.0
        self.span: Any = None
        self._token: object = None
        if not recording:
            return
        otel = telemetry.otel
        attributes = calls.attributes  # the SDK copies what it is given
        if telemetry.content:
            attributes = {
                **attributes,
                "gen_ai.input.messages": _json([_gen_ai_message(m) for m in messages]),
            }
            if system:
                attributes["gen_ai.system_instructions"] = _json(
                    [{"type": "text", "content": system}]
                )
        span = self.span = telemetry.tracer.start_span(
            calls.name, context=context, kind=otel.client, attributes=attributes
        )
        # made current in the turn's context (which is current: this saves looking it up)
        self._token = otel.attach(otel.in_context(span, context))

    def end(self, response: Any = None, error: BaseException | None = None) -> None:
        """End the call: its ``ModelResponse`` (``None``: dropped, steered), or its error."""
        telemetry, span = self.telemetry, self.span
        usage: Usage | None = None
        if response is not None:
            usage = response.usage
            # Usage() (none reported): its fields, not attrs' __eq__, which is a call
            if (
                not (usage.input_tokens or usage.output_tokens or usage.cost_usd)
                and response.message.usage is not None
            ):
                usage = response.message.usage
        if telemetry.duration is not None:
            self._measure(response, usage, error)
        if span is None:
            return
        otel = telemetry.otel
        otel.detach(self._token)
        if error is not None:
            _fail(otel, span, error, telemetry.content)
        elif response is None:
            span.set_attribute("lousho.steered", True)
        else:
            usage = usage or NO_USAGE
            attributes: dict[str, Any] = {
                "gen_ai.response.finish_reasons": (response.finish_reason,),
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
            }
            if response.model:
                attributes["gen_ai.response.model"] = response.model
            if usage.cache_read_tokens:
                attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_tokens
            if usage.cache_write_tokens:
                attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
            if telemetry.content:
                out = _gen_ai_message(response.message)
                out["finish_reason"] = response.finish_reason
                attributes["gen_ai.output.messages"] = _json([out])
            span.set_attributes(attributes)
        span.end()

    def _measure(self, response: Any, usage: Usage | None, error: BaseException | None) -> None:
        telemetry, calls = self.telemetry, self.calls
        key = (
            response.model if response is not None else None,
            _error_type(error) if error is not None else None,
        )
        sets = calls.measured.get(key)
        if sets is None:
            sets = _metric_attributes(calls.provider, calls.model, *key)
            if len(calls.measured) < 256:  # a bound, whatever the provider says
                calls.measured[key] = sets
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


def _fail(otel: Any, span: Any, error: BaseException, content: bool) -> None:
    """Mark ``span`` failed; ``str(error)`` (often quoting tool arguments or user input) is
    its status description only with ``content``, else the error's type and ``code``."""
    kind, code = _error_type(error), getattr(error, "code", None)
    span.set_attribute("error.type", kind)
    described = str(error) if content else kind if not isinstance(code, str) else f"{kind} ({code})"
    span.set_status(otel.Status(otel.error, described))


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
