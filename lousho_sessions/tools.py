"""Tools: ``@tool`` turns a typed function into something a model can call.

The JSON schema comes from the type hints, the description from the docstring's
first paragraph, and parameter descriptions from a Google-style ``Args:``
section. A first parameter typed ``ToolContext`` receives the call's context.
"""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Union, overload

import attrs

from .abort import AbortSignal
from .providers.base import ToolSpec

__all__ = ["Tool", "ToolContext", "ToolSpec", "as_tool", "tool"]


@attrs.frozen
class ToolContext:
    """What a tool may know about its call.

    ``idempotency_key`` is the same every time this call runs, also after a crash
    and ``resume()`` in another process: use it to make side effects idempotent.
    """

    session_id: str | None
    run_id: str
    call_id: str
    signal: AbortSignal
    idempotency_key: str


NeedsApproval = Union[bool, Callable[[Mapping[str, Any]], bool]]


@attrs.frozen
class Tool:
    """A callable the model may use. Build one with :func:`tool`."""

    fn: Callable[..., Any]
    name: str
    description: str
    parameters: Mapping[str, Any]
    needs_approval: NeedsApproval = False
    takes_context: bool = False

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)

    def requires_approval(self, arguments: Mapping[str, Any]) -> bool:
        if callable(self.needs_approval):
            return bool(self.needs_approval(arguments))
        return bool(self.needs_approval)

    def invoke(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Run the tool; its return value as text (JSON for anything not a ``str``)."""
        if not isinstance(arguments, Mapping):
            raise TypeError(f"tool {self.name!r}: arguments must be a JSON object")
        args = dict(arguments)
        result = self.fn(context, **args) if self.takes_context else self.fn(**args)
        if isinstance(result, str):
            return result
        return json.dumps(result, default=str)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: NeedsApproval = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: NeedsApproval = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a ``Tool`` of ``fn``; use bare (``@tool``) or with options (``@tool(needs_approval=True)``)."""

    def build(f: Callable[..., Any]) -> Tool:
        params, takes_context = _schema_for(f)
        tool_name = name or getattr(f, "__name__", None)
        if not tool_name or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", tool_name):
            raise ValueError(
                f"invalid tool name {tool_name!r}: tool names must match ^[A-Za-z0-9_-]{{1,64}}$"
            )
        doc_summary, _ = _parse_doc(inspect.getdoc(f) or "")
        return Tool(
            fn=f,
            name=tool_name,
            description=description if description is not None else doc_summary,
            parameters=params,
            needs_approval=needs_approval,
            takes_context=takes_context,
        )

    if fn is not None:
        return build(fn)
    return build


def as_tool(obj: Tool | Callable[..., Any]) -> Tool:
    """``obj`` if it is a ``Tool``, else ``tool(obj)``."""
    if isinstance(obj, Tool):
        return obj
    if callable(obj):
        return tool(obj)
    raise TypeError(f"not a tool or a callable: {obj!r}")


def _parse_doc(doc: str) -> tuple[str, dict[str, str]]:
    """The description (text before ``Args:``) and each argument's description."""
    summary_lines: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for raw in doc.splitlines():
        line = raw.strip()
        header = re.fullmatch(
            r"(Args|Arguments|Parameters|Returns|Raises|Yields|Example|Examples):", line
        )
        if header:
            section = header.group(1)
            current = None
            continue
        if section is None:
            summary_lines.append(raw)
        elif section in ("Args", "Arguments", "Parameters") and line:
            m = re.match(r"(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)", line)
            if (
                m
                and raw.startswith((" ", "\t"))
                and (current is None or not raw.startswith("        "))
            ):
                current = m.group(1)
                args[current] = m.group(2)
            elif current is not None:
                args[current] = (args[current] + " " + line).strip()
    return "\n".join(summary_lines).strip(), args


def _schema_for(fn: Callable[..., Any]) -> tuple[dict[str, Any], bool]:
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise TypeError(
            f"tool {getattr(fn, '__name__', fn)!r}: cannot read type hints: {exc}"
        ) from exc
    _, arg_docs = _parse_doc(inspect.getdoc(fn) or "")
    properties: dict[str, Any] = {}
    required: list[str] = []
    takes_context = False
    for index, (pname, param) in enumerate(sig.parameters.items()):
        hint = hints.get(pname, Any)
        if index == 0 and hint is ToolContext:
            takes_context = True
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.kind is param.POSITIONAL_ONLY:
            raise TypeError(
                f"tool {fn.__name__!r}: positional-only parameter {pname!r} is not supported"
            )
        schema = json_schema(hint)
        if pname in arg_docs:
            schema = {**schema, "description": arg_docs[pname]}
        if param.default is param.empty:
            required.append(pname)
        elif _json_safe(param.default):
            schema = {**schema, "default": param.default}
        properties[pname] = schema
    result: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        result["required"] = required
    return result, takes_context


def _json_safe(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def json_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema of a type hint (str, int, float, bool, list, dict, Optional, Literal, Enum)."""
    if hint is Any or hint is inspect.Parameter.empty:
        return {}
    if hint is str:
        return {"type": "string"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if hint is type(None):
        return {"type": "null"}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        schemas = [json_schema(a) for a in non_null]
        if len(non_null) < len(args):
            schemas.append({"type": "null"})
        return {"anyOf": schemas}
    if origin in (list, Sequence, tuple, set, frozenset) or hint in (list, tuple, set):
        item = args[0] if args else Any
        return {"type": "array", "items": json_schema(item)}
    if origin in (dict, Mapping) or hint is dict:
        value = args[1] if len(args) == 2 else Any
        schema: dict[str, Any] = {"type": "object"}
        if value is not Any:
            schema["additionalProperties"] = json_schema(value)
        return schema
    if typing.get_origin(hint) is typing.Annotated:
        return json_schema(args[0])
    raise TypeError(
        f"cannot describe type {hint!r} as JSON schema; use str, int, float, bool, list, dict, Literal or Enum"
    )
