"""``DemoProvider``: an offline, deterministic model for demos and docs.

It remembers facts stated in the transcript ("My name is Ali." then "What is my
name?" answers "Your name is Ali."), calls a tool when the user's message names
it (``get_weather`` is named by "weather"), and reports the tool's answer. Asked for
a structured answer (``output_type``), it answers JSON of the schema, filling each
field from a fact of the same name ("My age is 31." fills ``age``), else with a
placeholder.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from ..abort import AbortSignal
from ..messages import Message, ToolCall, Usage
from .base import (
    ModelEvent,
    ModelRequest,
    ModelResponse,
    ModelTextDelta,
    ProviderBase,
    ToolSpec,
)

__all__ = ["DemoProvider"]

_FACT = re.compile(r"\bmy ([a-z][a-z ]{0,30}?) is ([^.?!,;]+)", re.IGNORECASE)
_QUESTION = re.compile(r"\bwhat(?:'s| is) my ([a-z][a-z ]{0,30}?)\s*\?", re.IGNORECASE)


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


class DemoProvider(ProviderBase):
    """Offline, no key, deterministic; see the module docstring for what it can do."""

    name = "demo"

    def stream(self, request: ModelRequest, signal: AbortSignal) -> Iterator[ModelEvent]:
        message = self._reply(request)
        for chunk in re.findall(r"\S+\s*", message.text):
            if signal.aborted:
                return
            yield ModelTextDelta(chunk)
        prompt = (request.system or "") + "".join(m.text for m in request.messages)
        usage = Usage(_tokens(prompt), _tokens(message.text or "x"))
        message = Message.assistant(message.text, tool_calls=message.tool_calls, usage=usage)
        yield ModelResponse(message, usage, "tool_calls" if message.tool_calls else "stop")

    def _reply(self, request: ModelRequest) -> Message:
        message = self._free_reply(request)
        if request.output_schema is None or message.tool_calls:
            return message
        facts = self._facts(request.messages)
        value = _example(request.output_schema.schema, facts, "")
        return Message.assistant(json.dumps(value))

    def _free_reply(self, request: ModelRequest) -> Message:
        messages = request.messages
        if not messages:
            return Message.assistant("Hello! Say something.")
        last = messages[-1]
        if last.role == "tool":
            return Message.assistant(self._report_tools(messages))
        text = last.text
        call = self._tool_call(text, request.tools, len(messages))
        if call is not None:
            return Message.assistant("", tool_calls=[call])
        question = _QUESTION.search(text)
        if question:
            key = question.group(1).strip().lower()
            facts = self._facts(messages[:-1])
            if key in facts:
                return Message.assistant(f"Your {key} is {facts[key]}.")
            return Message.assistant(f"I don't know your {key} yet.")
        stated = _FACT.findall(text)
        if stated:
            key, value = stated[-1][0].strip().lower(), stated[-1][1].strip()
            if key == "name":
                return Message.assistant(f"Nice to meet you, {value}.")
            return Message.assistant(f"Got it: your {key} is {value}.")
        turns = sum(1 for m in messages if m.role == "user")
        return Message.assistant(f"You said: {text.strip()} (message {turns} from you).")

    @staticmethod
    def _facts(messages: tuple[Message, ...]) -> dict[str, str]:
        facts: dict[str, str] = {}
        for m in messages:
            if m.role == "user":
                for key, value in _FACT.findall(m.text):
                    facts[key.strip().lower()] = value.strip()
        return facts

    @staticmethod
    def _report_tools(messages: tuple[Message, ...]) -> str:
        names: dict[str, str] = {}
        for m in messages:
            for c in m.tool_calls:
                names[c.id] = c.name
        results = []
        for m in reversed(messages):
            if m.role != "tool":
                break
            results.append(f"{names.get(m.tool_call_id or '', 'the tool')} says: {m.text}")
        return " ".join(reversed(results))

    @staticmethod
    def _tool_call(text: str, tools: tuple[ToolSpec, ...], n: int) -> ToolCall | None:
        lowered = text.lower()
        for spec in tools:
            words = [
                w
                for w in re.split(r"[_\-]", spec.name.lower())
                if w not in ("get", "do", "run", "set")
            ]
            if spec.name.lower() in lowered or any(len(w) > 2 and w in lowered for w in words):
                args = _arguments(text, spec.parameters)
                if args is not None:
                    return ToolCall(f"call_{n}_{spec.name}", spec.name, args)
        return None


def _arguments(text: str, schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """Fill the tool's required arguments from ``text``; ``None`` if one cannot be found."""
    properties: Mapping[str, Any] = schema.get("properties", {})
    args: dict[str, Any] = {}
    for name in schema.get("required", []):
        kind = properties.get(name, {}).get("type")
        if kind in ("integer", "number"):
            number = re.search(r"-?\d+(?:\.\d+)?", text)
            if number is None:
                return None
            args[name] = int(float(number.group())) if kind == "integer" else float(number.group())
        elif kind == "boolean":
            args[name] = not re.search(r"\b(no|not|false)\b", text, re.IGNORECASE)
        else:
            quoted = re.search(r"[\"']([^\"']+)[\"']", text)
            place = re.search(
                r"\b(?:in|for|of|at|to|named|called)\s+([A-Z][\w.\-/]*(?:\s+[A-Z][\w\-]*)*)", text
            )
            capital = re.findall(r"(?<!^)\b([A-Z][a-z][\w\-]*)", text)
            value = (
                quoted.group(1)
                if quoted
                else place.group(1)
                if place
                else capital[-1]
                if capital
                else None
            )
            if value is None:
                return None
            args[name] = value.rstrip(".?!")
    return args


def _example(schema: Mapping[str, Any], facts: Mapping[str, str], key: str) -> Any:
    """A value of ``schema``: the fact named ``key`` where it fits, else a placeholder."""
    options = [o for o in schema.get("anyOf", ()) if o.get("type") != "null"]
    if options:
        return _example(options[0], facts, key)
    if "enum" in schema:
        fact = facts.get(key.replace("_", " ").lower())
        return fact if fact in schema["enum"] else schema["enum"][0]
    kind = schema.get("type")
    fact = facts.get(key.replace("_", " ").lower())
    if kind == "object":
        properties: Mapping[str, Any] = schema.get("properties", {})
        return {name: _example(s, facts, name) for name, s in properties.items()}
    if kind == "array":
        return [_example(schema.get("items", {}), facts, key)]
    if kind in ("integer", "number"):
        number = re.search(r"-?\d+(?:\.\d+)?", fact or "")
        value = float(number.group()) if number else 0
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return not re.search(r"\b(no|not|false)\b", fact or "", re.IGNORECASE)
    if kind == "null":
        return None
    return fact if fact is not None else f"<{key or 'text'}>"
