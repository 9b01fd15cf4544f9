"""The trace context a turn keeps in its checkpoint, so that a resumed run continues it,
and ``Otel``, the parts of the OpenTelemetry API the spans use (looked up once per agent).

A checkpoint's ``trace`` field holds the span context of the run that started the turn
as a W3C ``traceparent`` (and ``tracestate`` when there is one) and the number of the
run (``attempt``). A checkpoint is data from elsewhere: ``restore`` trusts nothing in
it and answers None for anything that is not a valid span context.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["TRACE_FIELD", "Otel", "restore", "traceparent"]

#: The checkpoint field holding a turn's trace context (unknown fields round-trip,
#: so a release without tracing keeps it).
TRACE_FIELD = "trace"
#: A W3C traceparent of version 00: trace id, parent span id, flags, in lowercase hex.
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


class Otel:
    """The parts of the API the spans use, looked up once per agent."""

    __slots__ = (
        "Link", "NonRecordingSpan", "SpanContext", "Status", "TraceFlags", "TraceState",
        "attach", "client", "current", "detach", "error", "in_context", "internal",
    )  # fmt: skip

    def __init__(self, context: Any, trace: Any) -> None:
        self.attach, self.detach = context.attach, context.detach
        self.current = context.get_current
        self.in_context = trace.set_span_in_context
        self.Link, self.NonRecordingSpan = trace.Link, trace.NonRecordingSpan
        self.SpanContext, self.TraceFlags, self.TraceState = (
            trace.SpanContext,
            trace.TraceFlags,
            trace.TraceState,
        )
        self.Status, self.error = trace.Status, trace.StatusCode.ERROR
        self.internal, self.client = trace.SpanKind.INTERNAL, trace.SpanKind.CLIENT


def traceparent(context: Any, attempt: int) -> dict[str, Any]:
    """A span context as the W3C trace context headers say it, and the run's attempt."""
    # SpanContext is a tuple (trace id, span id, remote, flags, state, valid): read as one,
    # not through five properties; printf-style formatting is half the f-string's work
    trace_id, span_id, _, flags, state = context[:5]
    saved: dict[str, Any] = {
        "traceparent": "00-%032x-%016x-%02x" % (trace_id, span_id, flags),  # noqa: UP031
        "attempt": attempt,
    }
    if state:
        saved["tracestate"] = state.to_header()
    return saved


def restore(otel: Any, saved: Mapping[str, Any]) -> Any:
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
