"""Tool parameters (issue 11.2, 11.9): JSON schema of rich hints, strict argument checks."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import uuid
from typing import Any, Literal, Optional, TypedDict

import attrs
import pytest
from helpers import calls

from lousho_sessions import (
    ApprovalRequest,
    FunctionProvider,
    LoushoError,
    Message,
    ModelRequest,
    ScriptedProvider,
    ToolArgumentsError,
    ToolCall,
    ToolContext,
    ToolDefinitionError,
    create_agent,
    tool,
)
from lousho_sessions.events import ToolResultEvent
from lousho_sessions.tools import json_schema


@attrs.define
class Address:
    street: str
    zip: str
    floor: int = 0


@dataclasses.dataclass
class Point:
    x: float
    y: float


class Filter(TypedDict, total=False):
    tag: str
    limit: int


class Size(enum.Enum):
    SMALL = "s"
    LARGE = "l"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


def test_schema_of_rich_hints() -> None:
    assert json_schema(tuple[int, str]) == {
        "type": "array",
        "prefixItems": [{"type": "integer"}, {"type": "string"}],
        "minItems": 2,
        "maxItems": 2,
    }
    assert json_schema(tuple[int, ...]) == {"type": "array", "items": {"type": "integer"}}
    assert json_schema(set[str]) == {
        "type": "array",
        "items": {"type": "string"},
        "uniqueItems": True,
    }
    assert json_schema(datetime.datetime) == {"type": "string", "format": "date-time"}
    assert json_schema(datetime.date) == {"type": "string", "format": "date"}
    assert json_schema(uuid.UUID) == {"type": "string", "format": "uuid"}
    assert json_schema(Priority) == {"enum": [1, 2]}
    assert json_schema(Optional[int]) == {"anyOf": [{"type": "integer"}, {"type": "null"}]}  # noqa: UP045
    assert json_schema(Address) == {
        "type": "object",
        "properties": {
            "street": {"type": "string"},
            "zip": {"type": "string"},
            "floor": {"type": "integer", "default": 0},
        },
        "additionalProperties": False,
        "required": ["street", "zip"],
    }
    assert json_schema(Point)["required"] == ["x", "y"]
    assert json_schema(Point)["properties"]["x"] == {"type": "number"}
    assert json_schema(Filter) == {
        "type": "object",
        "properties": {"tag": {"type": "string"}, "limit": {"type": "integer"}},
        "additionalProperties": False,
    }
    assert json_schema(list[Address])["items"]["properties"]["zip"] == {"type": "string"}


def test_context_stays_out_of_a_rich_schema() -> None:
    @tool
    def ship(ctx: ToolContext, to: Address, at: datetime.date, size: Size = Size.SMALL) -> str:
        """Ship a parcel."""
        return ""

    assert list(ship.parameters["properties"]) == ["to", "at", "size"]
    assert ship.parameters["required"] == ["to", "at"]


def test_arguments_are_converted_to_the_hinted_types() -> None:
    seen: list[tuple[Any, ...]] = []

    @tool
    def book(
        who: Address,
        where: Point,
        when: datetime.datetime,
        day: datetime.date,
        size: Size,
        prio: Priority,
        kind: Literal["a", "b"],
        pair: tuple[int, str],
        tags: set[str],
        scores: dict[str, float],
        flt: Filter,
        note: str | None = None,
    ) -> str:
        """Book."""
        seen.append((who, where, when, day, size, prio, kind, pair, tags, scores, flt, note))
        return "booked"

    args = {
        "who": {"street": "Main", "zip": "123"},
        "where": {"x": 1, "y": 2.5},
        "when": "2024-05-01T10:00:00Z",
        "day": "2024-05-01",
        "size": "l",
        "prio": 2,
        "kind": "b",
        "pair": [3, "x"],
        "tags": ["a", "a"],
        "scores": {"m": 1},
        "flt": {"tag": "t"},
        "note": None,
    }
    assert book.check_arguments(args)["when"].tzinfo == datetime.timezone.utc
    provider = ScriptedProvider([calls(("book", args)), "ok"])
    create_agent(provider=provider, tools=[book]).send("x")
    ((who, where, when, day, size, prio, kind, pair, tags, scores, flt, note),) = seen
    assert who == Address("Main", "123") and where == Point(1.0, 2.5)
    assert when == datetime.datetime(2024, 5, 1, 10, tzinfo=datetime.timezone.utc)
    assert day == datetime.date(2024, 5, 1) and size is Size.LARGE and prio is Priority.HIGH
    assert kind == "b" and pair == (3, "x") and tags == {"a"} and scores == {"m": 1.0}
    assert flt == {"tag": "t"} and note is None
    assert isinstance(scores["m"], float)


@pytest.mark.parametrize(
    ("value", "accepted"),
    [(30, 30), (30.0, 30), ("30", None), ("thirty", None), (30.5, None), (True, None)],
)
def test_int_rule_json_types_must_match(value: object, accepted: int | None) -> None:
    @tool
    def age(years: int) -> str:
        """Age."""
        return ""

    if accepted is not None:
        result = age.check_arguments({"years": value})["years"]
        assert result == accepted and type(result) is int
    else:
        with pytest.raises(ToolArgumentsError, match=r"argument 'years': expected integer, got"):
            age.check_arguments({"years": value})


def test_every_problem_is_named() -> None:
    @tool
    def book(who: Address, n: int, kind: Literal["a", "b"], pair: tuple[int, str]) -> str:
        """Book."""
        return ""

    with pytest.raises(ToolArgumentsError) as info:
        book.check_arguments(
            {"who": {"zip": 1, "extra": 2}, "kind": "c", "pair": [1, 2], "bogus": 0}
        )
    text = str(info.value)
    assert isinstance(info.value, LoushoError) and isinstance(info.value, TypeError)
    assert text.startswith("invalid arguments for tool 'book': ")
    for part in (
        "unknown argument 'bogus' (parameters: who, n, kind, pair)",
        "missing required argument 'n' (integer)",
        "argument 'who.zip': expected string, got integer 1",
        "argument 'who.street': missing required field (string)",
        "argument 'who': unknown fields: extra",
        'argument \'kind\': expected one of "a", "b", got string "c"',
        "argument 'pair[1]': expected string, got integer 2",
    ):
        assert part in text, (part, text)


def test_long_values_are_truncated_in_messages() -> None:
    @tool
    def count(n: int) -> str:
        """Count."""
        return ""

    with pytest.raises(ToolArgumentsError) as info:
        count.check_arguments({"n": "x" * 10_000})
    assert len(str(info.value)) < 200


def test_model_gets_an_error_result_and_can_retry() -> None:
    ran: list[int] = []

    @tool
    def set_age(years: int) -> str:
        """Set the age."""
        ran.append(years)
        return f"age {years}"

    events: list[ToolResultEvent] = []
    provider = ScriptedProvider(
        [calls(("set_age", {"years": "thirty"})), calls(("set_age", {"years": 30})), "done"]
    )
    session = create_agent(provider=provider, tools=[set_age]).session()
    run = session.stream("I am thirty")
    events = [e for e in run if isinstance(e, ToolResultEvent)]
    assert run.result().text == "done"
    assert ran == [30]  # the bad call never reached the function
    first, second = events
    assert first.is_error and isinstance(first.exception, ToolArgumentsError)
    assert first.output.startswith("Error: TypeError: invalid arguments for tool 'set_age': ")
    assert "argument 'years': expected integer, got string \"thirty\"" in first.output
    assert "call it again" in first.output
    assert provider.calls[1].messages[-1].is_error
    assert not second.is_error and second.output == "age 30" and second.exception is None


def test_bad_arguments_are_refused_before_asking_for_approval() -> None:
    asked: list[str] = []

    @tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        return "paid"

    def model(request: ModelRequest) -> Message | str:
        if request.messages[-1].role == "user":
            return Message.assistant("", tool_calls=[ToolCall("p1", "pay", {"amount": "lots"})])
        return request.messages[-1].text

    def approve(request: ApprovalRequest) -> bool:
        asked.append(request.call.id)
        return True

    agent = create_agent(provider=FunctionProvider(model), tools=[pay], approve=approve)
    result = agent.session().send("pay")
    assert asked == [] and result.finish_reason == "stop"
    assert "argument 'amount': expected integer" in result.text


def test_undescribable_type_names_the_tool_and_parameter() -> None:
    with pytest.raises(ToolDefinitionError) as info:

        @tool(name="bad_tool")
        def bad(ok: int, x: object) -> str:
            """Bad."""
            return ""

    message = str(info.value)
    assert "tool 'bad_tool', parameter 'x': cannot describe type object" in message
    assert isinstance(info.value, TypeError) and isinstance(info.value, LoushoError)


@pytest.mark.parametrize(
    ("hint", "why"),
    [
        (dict[int, str], "JSON object keys are strings"),
        (list[object], "cannot describe type object"),
        (Literal[b"x"], "is not a JSON value"),
    ],
)
def test_each_undescribable_hint_is_refused(hint: Any, why: str) -> None:
    def fn(value: Any) -> str:
        """Fn."""
        return ""

    fn.__annotations__["value"] = hint
    with pytest.raises(ToolDefinitionError, match=f"tool 'fn', parameter 'value': .*{why}"):
        tool(fn)


@attrs.define
class Node:
    name: str
    children: list[Node]


@attrs.define
class Holder:
    callback: object


def test_nested_problems_name_the_field() -> None:
    with pytest.raises(ToolDefinitionError, match=r"parameter 'tree': .*contains itself"):

        @tool
        def walk(tree: Node) -> str:
            """Walk."""
            return ""

    with pytest.raises(ToolDefinitionError, match=r"parameter 'h': field Holder\.callback"):

        @tool
        def hold(h: Holder) -> str:
            """Hold."""
            return ""


def test_unresolvable_hint_names_the_tool() -> None:
    def broken(x: Missing) -> str:  # type: ignore[name-defined]  # noqa: F821
        """Broken."""
        return ""

    with pytest.raises(ToolDefinitionError, match="tool 'broken': cannot read type hints"):
        tool(broken)


def test_positional_only_names_the_parameter() -> None:
    def pos(x: int, /) -> str:
        """Pos."""
        return ""

    with pytest.raises(ToolDefinitionError, match="tool 'pos', parameter 'x': positional-only"):
        tool(pos)


def test_invalid_name_is_a_lousho_value_error() -> None:
    with pytest.raises(ToolDefinitionError, match="invalid tool name") as info:
        tool(name="has space")(lambda: "x")
    assert isinstance(info.value, ValueError)


def test_var_keyword_accepts_extra_arguments() -> None:
    @tool
    def anything(name: str, **rest: Any) -> str:
        """Anything."""
        return f"{name} {sorted(rest)}"

    assert anything.parameters["additionalProperties"] is True
    assert anything.check_arguments({"name": "n", "x": 1}) == {"name": "n", "x": 1}
