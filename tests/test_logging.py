"""Logging (issue 17): named loggers, all documented; no prints; keys never logged or traced."""

from __future__ import annotations

import ast
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from provider_server import JSONReply, ProviderServer, SSEReply
from provider_wires import KEY, HttpProvider, Wire
from test_providers_redaction import assert_no_key
from test_tracing import Otel

from lousho_sessions import LoushoError

PACKAGE = Path(__file__).parent.parent / "lousho_sessions"
OPERATIONS = Path(__file__).parent.parent / "docs" / "operations.md"


def logger_names() -> set[str]:
    """Every ``logging.getLogger("…")`` name in the package."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "getLogger"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                names.add(str(node.args[0].value))
    return names


def test_every_logger_is_under_the_package_and_in_the_documented_table() -> None:
    names = logger_names()
    assert "lousho_sessions.turn" in names  # the walk finds them
    assert all(n == "lousho_sessions" or n.startswith("lousho_sessions.") for n in names)
    text = OPERATIONS.read_text(encoding="utf-8")
    section = text[text.index("## Logging") :]
    documented = set(re.findall(r"^\| `(lousho_sessions[\w.]*)` \|", section, re.M))
    assert documented == names


def test_the_library_never_prints() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path in PACKAGE.rglob("*.py")
        if path.name != "demo.py"  # the demo program's output is its point
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "print"
    ]
    assert found == []


def test_a_key_never_reaches_the_logs_or_the_spans_on_failing_paths(
    wire: Wire,
    server: ProviderServer,
    make: Callable[..., HttpProvider],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A provider with a key, through retried 500s echoing it, an error event echoing it
    and a refused 401, with DEBUG logs of every logger and content tracing on."""
    caplog.set_level(logging.DEBUG)
    echo = '{"error": {"message": "bad key {api_key}"}}'
    if wire.kind == "anthropic":
        event = {"type": "error", "error": {"type": "api_error", "message": f"key {KEY}"}}
        stream = b"event: error\ndata: " + json.dumps(event).encode() + b"\n\n"
    else:
        stream = b"data: " + json.dumps({"error": {"message": f"key {KEY}"}}).encode() + b"\n\n"
    server.reply(
        *[JSONReply(500, echo)] * 3,  # retried, then given up
        SSEReply([stream]),
        JSONReply(401, echo),
    )
    otel = Otel()
    agent = otel.agent(provider=make(), trace_content=True)
    errors: list[LoushoError] = []
    for turn in range(3):
        with pytest.raises(LoushoError) as caught:
            agent.session(f"s-{turn}").send(f"attempt {turn}")
        errors.append(caught.value)
    agent.close()
    assert len(server.requests) == 5 and caplog.records  # every path ran, and logged
    spans = otel.spans()
    assert len(spans) == 6
    texts = [caplog.text, *(r.getMessage() for r in caplog.records)]
    texts += [str(e) for e in errors]
    for span in spans:
        texts.append(json.dumps(dict(span.attributes or {}), default=str))
        texts.append(span.status.description or "")
        texts += [json.dumps(dict(e.attributes or {}), default=str) for e in span.events]
    assert_no_key(*texts)
    otel.tracer_provider.shutdown()
    otel.meter_provider.shutdown()
