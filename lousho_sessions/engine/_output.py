"""Typed output: the schema a turn's final answer must fit, its parsing, and repair rounds.

The JSON schema is ``_schema.json_schema``'s, the one tool parameters get, and the
check is ``_arguments.converter``'s strict rule (JSON types must match; unknown keys
are refused). A type that is not a JSON object (a list, a ``Literal``, an enum, a
primitive) is wrapped as ``{"value": ...}``: native structured-output modes want an
object at the top, and one shape for every provider keeps a transcript portable.

A reply that does not fit gets a repair round: a user message naming each problem
and asking again (``output_repair`` in its metadata, so the rounds a turn used are
counted from the turn's own messages and survive a crash). When the rounds are used
up, ``OutputValidationError``.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import typing
from typing import Any

import attrs

from ..errors import OutputValidationError, ToolDefinitionError
from ..messages import Message
from ..providers.base import OutputSchema
from ..tools._arguments import (
    NONE_TYPE,
    converter,
    is_mapping_hint,
    is_record,
    is_sequence,
    type_name,
    value_problems,
)
from ..tools._schema import _record_fields, json_schema, parse_doc

__all__ = ["REPAIR_KEY", "WRAP_KEY", "OutputSpec", "output_spec", "repairs_in"]

#: the key a type that is not an object is wrapped in: ``{"value": [...]}``
WRAP_KEY = "value"
#: the metadata key of a repair message
REPAIR_KEY = "output_repair"
_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n(.*?)\n?\s*```\s*$", re.DOTALL)


@attrs.frozen
class OutputSpec:
    """A compiled ``output_type``: what the model is asked for and how its reply is read."""

    type: Any
    schema: OutputSchema
    wrapped: bool
    retries: int = 1

    def parse(self, text: str) -> Any:
        """The reply ``text`` as ``type``; ``OutputValidationError`` naming each problem's path."""
        match = _FENCE.match(text)  # a model without a native mode may fence its JSON
        try:
            value = json.loads(match.group(1) if match else text)
        except (ValueError, RecursionError) as exc:
            raise self._error([f"$: not valid JSON ({exc})"], text) from None
        path = "$"
        if self.wrapped:
            if not isinstance(value, dict) or WRAP_KEY not in value or len(value) != 1:
                shown = json.dumps(value)[:60] if not isinstance(value, dict) else "an object"
                problem = f'$: expected an object {{"{WRAP_KEY}": ...}}, got {shown}'
                raise self._error([problem], text)
            value, path = value[WRAP_KEY], f"$.{WRAP_KEY}"
        try:
            return converter.structure(_drop_nulls(value, self.type), self.type)
        except Exception as exc:
            raise self._error(value_problems(exc, path), text) from None

    def settle(self, new: list[Message]) -> tuple[Any, bool]:
        """Read the final answer, the last of ``new``: ``(output, False)`` when it fits;
        ``(None, True)`` after adding a repair message to ``new``; raises when no round is left."""
        try:
            return self.parse(new[-1].text), False
        except OutputValidationError as exc:
            if repairs_in(new) >= self.retries:
                raise
            new.append(self.repair(exc))
            return None, True

    def repair(self, error: OutputValidationError) -> Message:
        """The user message that sends ``error`` back to the model."""
        schema = json.dumps(self.schema.schema, separators=(",", ":"))
        text = (
            "Your answer does not fit the required output: "
            + "; ".join(error.problems)
            + f". Answer again with only the JSON, fitting this schema: {schema}"
        )
        return Message.user(text, metadata={REPAIR_KEY: True})

    def _error(self, problems: list[str], text: str) -> OutputValidationError:
        path = problems[0].partition(": ")[0] if problems else "$"
        return OutputValidationError(
            f"the reply does not fit output type {type_name(self.type)}: " + "; ".join(problems),
            problems=tuple(problems),
            path=path,
            text=text,
        )


def output_spec(output_type: Any, retries: int = 1) -> OutputSpec:
    """Compile ``output_type``; ``ToolDefinitionError`` (a ``TypeError``) if it has no JSON schema."""
    try:
        inner = json_schema(output_type)
        converter.get_structure_hook(output_type)
    except Exception as exc:
        raise ToolDefinitionError(f"output_type {type_name(output_type)}: {exc}") from None
    wrapped = not is_record(output_type)
    schema = inner
    if wrapped:
        schema = {
            "type": "object",
            "properties": {WRAP_KEY: inner},
            "required": [WRAP_KEY],
            "additionalProperties": False,
        }
    return OutputSpec(
        output_type,
        OutputSchema(_name(output_type), schema, _description(output_type)),
        wrapped,
        retries,
    )


def repairs_in(new: list[Message]) -> int:
    """How many repair rounds the turn whose messages are ``new`` has used."""
    return sum(1 for m in new if m.role == "user" and m.metadata.get(REPAIR_KEY))


def _name(hint: Any) -> str:
    name = hint.__name__ if isinstance(hint, type) and not typing.get_args(hint) else "output"
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "output"


def _description(hint: Any) -> str:
    """The summary of a record's own docstring (not one ``dataclass`` made up)."""
    if not is_record(hint):
        return ""
    doc = hint.__dict__.get("__doc__")
    name: str = getattr(hint, "__name__", "")
    made_up = dataclasses.is_dataclass(hint) and (doc or "").startswith(f"{name}(")
    if not isinstance(doc, str) or made_up:
        return ""
    return parse_doc(inspect.cleandoc(doc))[0]


def _accepts_none(hint: Any) -> bool:
    return hint is Any or hint is NONE_TYPE or NONE_TYPE in typing.get_args(hint)


def _drop_nulls(value: Any, hint: Any) -> Any:
    """``value`` without the nulls of optional fields whose type takes no null.

    A strict structured-output mode (OpenAI's) must mark every field required, so an
    optional one is sent as nullable and the model writes ``null`` for "not given".
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return _drop_nulls(value, args[0])
    if is_record(hint) and isinstance(value, dict):
        fields = {name: (h, has_default) for name, h, _, has_default in _record_fields(hint)}
        out: dict[str, Any] = {}
        for key, item in value.items():
            field = fields.get(key)
            if field is not None and item is None and field[1] and not _accepts_none(field[0]):
                continue
            out[key] = _drop_nulls(item, field[0]) if field is not None else item
        return out
    if isinstance(value, list) and is_sequence(hint) and args:
        if origin is tuple and args[-1] is not Ellipsis:
            fixed = [_drop_nulls(v, h) for v, h in zip(value, args, strict=False)]
            return fixed + value[len(args) :]
        return [_drop_nulls(v, args[0]) for v in value]
    if isinstance(value, dict) and is_mapping_hint(hint) and len(args) == 2:
        return {k: _drop_nulls(v, args[1]) for k, v in value.items()}
    members = [a for a in args if a is not NONE_TYPE] if origin is not None else []
    if value is not None and len(members) == 1 and len(members) < len(args):  # Optional[X]
        return _drop_nulls(value, members[0])
    return value
