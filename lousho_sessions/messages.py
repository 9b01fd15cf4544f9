"""The transcript's data model: messages, their parts, tool calls and usage.

Every class here is a frozen, slotted attrs class (no ``__weakref__`` slot: a loaded
transcript holds tens of thousands of them, and nothing refers to one weakly) and every
mapping in one is read-only: a transcript snapshot cannot be edited in place. ``Message.metadata``,
``ToolCall.arguments`` and every ``extra`` are ``FrozenMapping`` copies of what was
given, frozen all the way down (a dict inside is a ``FrozenMapping``, a list a
``tuple``); ``thaw()`` gives plain, mutable ``dict``/``list`` copies back. ``extra``
holds fields written by a newer release so that they survive a load and save by
this one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Literal, NoReturn, Union

import attrs

from ._random import uuid4_hex

__all__ = [
    "FrozenMapping",
    "ImagePart",
    "Message",
    "Part",
    "ReasoningPart",
    "Role",
    "TextPart",
    "ToolCall",
    "Usage",
    "freeze",
    "thaw",
]

Role = Literal["user", "assistant", "tool", "system"]


class FrozenMapping(Mapping[str, Any]):
    """A read-only mapping: ``Message.metadata``, ``ToolCall.arguments``, ``extra``.

    ``FrozenMapping(data)`` copies ``data`` and freezes it all the way down: a mapping
    inside becomes a ``FrozenMapping``, a list or tuple a ``tuple``. Item assignment
    and the ``dict`` mutators raise ``TypeError``. It equals any mapping with the same
    items, lists and tuples alike (``FrozenMapping({"a": [1]}) == {"a": [1]}``), and
    is not hashable, like a ``dict``. ``thaw(m)`` gives a plain, mutable copy.
    """

    __slots__ = ("_data",)
    _data: dict[str, Any]

    def __new__(cls, data: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()) -> FrozenMapping:
        frozen = freeze(data if isinstance(data, Mapping) else dict(data))
        assert isinstance(frozen, FrozenMapping)
        return frozen

    @classmethod
    def _wrap(cls, data: dict[str, Any]) -> FrozenMapping:
        """A mapping over ``data``, whose values are frozen already; ``data`` is not copied."""
        self = object.__new__(cls)
        object.__setattr__(self, "_data", data)
        return self

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMapping):
            return self._data == other._data
        if not isinstance(other, Mapping):
            return NotImplemented
        try:
            frozen = freeze(other)
        except ValueError:  # a mapping that contains itself equals nothing frozen
            return False
        return isinstance(frozen, FrozenMapping) and self._data == frozen._data

    __hash__ = None  # type: ignore[assignment]  # like a dict: equal to dicts, so not hashable

    def __repr__(self) -> str:
        return f"FrozenMapping({self._data!r})"

    def __reduce__(self) -> tuple[Callable[..., FrozenMapping], tuple[dict[str, Any]]]:
        return FrozenMapping, (thaw(self),)

    def __copy__(self) -> FrozenMapping:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenMapping:
        return self

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise TypeError("FrozenMapping is read-only; thaw() gives a mutable copy")

    def __delattr__(self, name: str) -> NoReturn:
        raise TypeError("FrozenMapping is read-only; thaw() gives a mutable copy")

    def _read_only(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("FrozenMapping is read-only; thaw() gives a mutable copy")

    __setitem__ = __delitem__ = _read_only
    clear = pop = popitem = setdefault = update = __ior__ = _read_only


EMPTY = FrozenMapping._wrap({})


def freeze(value: Any) -> Any:
    """``value`` with every mapping in it a ``FrozenMapping`` and every list or tuple a tuple.

    Other values are kept as they are. Deep nesting is fine (past ``_FAST_DEPTH`` levels
    it walks without recursion); ``ValueError`` for a mapping or list that contains itself.
    """
    try:
        return _freeze_fast(value, 0)
    except _TooDeep:
        return _rebuild(value, _freeze_mapping, tuple, frozen=True)


def thaw(value: Any) -> Any:
    """A plain, mutable copy of ``value``: every mapping a ``dict``, every list or tuple a list."""
    try:
        return _thaw_fast(value, 0)
    except _TooDeep:
        return _rebuild(value, dict, list, frozen=False)


#: Nesting walked by plain recursion (the common case, and fast); deeper, or a value that
#: contains itself, goes to ``_rebuild``, which keeps its own stack and finds loops.
_FAST_DEPTH = 40
_SCALARS = frozenset({str, int, float, bool, type(None)})


class _TooDeep(Exception):
    pass


def _freeze_fast(value: Any, depth: int) -> Any:
    if type(value) in _SCALARS or isinstance(value, FrozenMapping):
        return value
    if depth > _FAST_DEPTH:
        raise _TooDeep
    if isinstance(value, Mapping):
        if not value:
            return EMPTY
        return FrozenMapping._wrap(
            {k: v if type(v) in _SCALARS else _freeze_fast(v, depth + 1) for k, v in value.items()}
        )
    if isinstance(value, (list, tuple)):
        return tuple(v if type(v) in _SCALARS else _freeze_fast(v, depth + 1) for v in value)
    return value


def _thaw_fast(value: Any, depth: int) -> Any:
    if type(value) in _SCALARS:
        return value
    if depth > _FAST_DEPTH:
        raise _TooDeep
    if type(value) is FrozenMapping:  # its dict's items, not the generic Mapping ones
        value = value._data
    if type(value) is dict or isinstance(value, Mapping):  # a dict: no ABC check
        return {k: v if type(v) in _SCALARS else _thaw_fast(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [v if type(v) in _SCALARS else _thaw_fast(v, depth + 1) for v in value]
    return value


def _freeze_mapping(pairs: list[tuple[Any, Any]]) -> FrozenMapping:
    return FrozenMapping._wrap(dict(pairs)) if pairs else EMPTY


_Frame = tuple[list[tuple[Any, Any]], bool, list[tuple[Any, Any]], int]


def _rebuild(
    value: Any,
    make_mapping: Callable[[list[tuple[Any, Any]]], Any],
    make_sequence: Callable[[Iterator[Any]], Any],
    *,
    frozen: bool,
) -> Any:
    """Copy the mappings and lists/tuples in ``value`` bottom-up, with an explicit stack."""

    def opens(item: Any) -> bool:
        if frozen and isinstance(item, FrozenMapping):
            return False  # frozen all the way down already
        return isinstance(item, (Mapping, list, tuple))

    def frame(item: Any) -> _Frame:
        if id(item) in active:
            raise ValueError(f"a {type(item).__name__} that contains itself cannot be frozen")
        active.add(id(item))
        if isinstance(item, Mapping):
            return list(item.items()), True, [], id(item)
        return list(enumerate(item)), False, [], id(item)

    if not opens(value):
        return value
    active: set[int] = set()
    stack = [frame(value)]
    while True:
        items, is_mapping, built, _ = stack[-1]
        if len(built) < len(items):
            key, child = items[len(built)]
            if opens(child):
                stack.append(frame(child))
            else:
                built.append((key, child))
            continue
        active.discard(stack.pop()[3])
        done = make_mapping(built) if is_mapping else make_sequence(v for _, v in built)
        if not stack:
            return done
        parent_items, _, parent_built, _ = stack[-1]
        parent_built.append((parent_items[len(parent_built)][0], done))


def _frozen_mapping(value: Mapping[str, Any] | Iterable[tuple[str, Any]] | None) -> FrozenMapping:
    if type(value) is FrozenMapping:  # frozen all the way down already: the common case
        return value if value._data else EMPTY
    if not value:
        return EMPTY
    frozen = freeze(value if isinstance(value, Mapping) else dict(value))
    assert isinstance(frozen, FrozenMapping)
    return frozen


@attrs.frozen(weakref_slot=False)
class TextPart:
    """Plain text in a message."""

    text: str
    type: Literal["text"] = attrs.field(default="text", init=False)
    extra: Mapping[str, Any] = attrs.field(
        default=EMPTY, converter=_frozen_mapping, repr=False, kw_only=True
    )


@attrs.frozen(weakref_slot=False)
class ImagePart:
    """An image, by ``url`` or inline ``data`` (bytes; kept as base64 in JSON)."""

    url: str | None = None
    data: bytes | None = None
    media_type: str | None = None
    type: Literal["image"] = attrs.field(default="image", init=False)
    extra: Mapping[str, Any] = attrs.field(
        default=EMPTY, converter=_frozen_mapping, repr=False, kw_only=True
    )

    def __attrs_post_init__(self) -> None:
        if (self.url is None) == (self.data is None):
            raise ValueError("ImagePart needs exactly one of url= or data=")
        if self.data is not None and not isinstance(self.data, bytes):
            raise TypeError(
                f"ImagePart data= must be bytes (the decoded image), got {type(self.data).__name__}"
            )


@attrs.frozen(weakref_slot=False)
class ReasoningPart:
    """A model's reasoning, kept on the assistant message that holds it.

    ``text`` is the visible reasoning (may be empty: redacted or encrypted reasoning
    shows nothing). ``provider`` is the family of API that made it (``"anthropic"``,
    ``"openai"``, ``"gemini"``, ...): it goes back only to that family, in the place it
    came, and is left out of calls to any other. ``signature``, ``data`` (redacted or
    encrypted content) and ``id`` are opaque values the provider needs back verbatim;
    ``extra`` holds anything else it returned that must be echoed. ``Message.text``
    leaves reasoning out; ``Message.reasoning`` joins its visible text.
    """

    text: str = ""
    provider: str = ""
    signature: str | None = None
    data: str | None = None
    id: str | None = None
    type: Literal["reasoning"] = attrs.field(default="reasoning", init=False)
    extra: Mapping[str, Any] = attrs.field(
        default=EMPTY, converter=_frozen_mapping, repr=False, kw_only=True
    )


Part = Union[TextPart, ImagePart, ReasoningPart]


@attrs.frozen(weakref_slot=False)
class ToolCall:
    """The model asks to run tool ``name`` with ``arguments``.

    ``raw_arguments`` is set only for a malformed call: the argument text the model
    sent when it was not a JSON object (``arguments`` is then empty). The turn does
    not run such a call; it answers it with an error result naming the JSON problem.
    """

    id: str
    name: str
    arguments: Mapping[str, Any] = attrs.field(default=EMPTY, converter=_frozen_mapping)
    raw_arguments: str | None = attrs.field(default=None, kw_only=True)
    extra: Mapping[str, Any] = attrs.field(
        default=EMPTY, converter=_frozen_mapping, repr=False, kw_only=True
    )


@attrs.frozen(weakref_slot=False)
class Usage:
    """Tokens and money a model call (or a sum of them) used. Adds with ``+``.

    ``input_tokens`` counts every prompt token the model read, **including** those read
    from or written to the provider's prompt cache; ``cache_read_tokens`` and
    ``cache_write_tokens`` say how many of them were (Anthropic reports the three apart
    and they are added up here; OpenAI and Gemini count cached tokens inside the prompt
    total already). Likewise ``output_tokens`` includes ``reasoning_tokens``, the
    tokens a reasoning model spent thinking (where the provider reports them).
    ``cost_usd`` prices each part at its own rate (see ``Pricing``).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cache_read_tokens: int = attrs.field(default=0, kw_only=True)
    cache_write_tokens: int = attrs.field(default=0, kw_only=True)
    reasoning_tokens: int = attrs.field(default=0, kw_only=True)
    extra: Mapping[str, Any] = attrs.field(
        default=EMPTY, converter=_frozen_mapping, repr=False, eq=False, kw_only=True
    )

    def __add__(self, other: Usage) -> Usage:
        # adding nothing (the shared zero, NO_USAGE) gives the other side as it is, the sum
        # being the same value: a turn sums its calls' usage several times, mostly from zero
        if other is NO_USAGE and self.__class__ is Usage and self.extra is EMPTY:
            return self
        if self is NO_USAGE and other.__class__ is Usage and other.extra is EMPTY:
            return other
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cost_usd + other.cost_usd,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def uncached_input_tokens(self) -> int:
        """The input tokens neither read from nor written to the prompt cache."""
        return self.input_tokens - self.cache_read_tokens - self.cache_write_tokens


#: ``Usage()``, shared: the zero a sum starts from, and the default of the classes that hold one
NO_USAGE = Usage()


def _parts(value: str | Sequence[Part]) -> tuple[Part, ...]:
    if isinstance(value, str):
        return (TextPart(value),)
    return tuple(value)


_PART_TYPES = (TextPart, ImagePart, ReasoningPart)


def _part_tuple(value: str | Iterable[Part]) -> tuple[Part, ...]:
    """``Message(content=)``: a string is one ``TextPart``; anything else must be parts
    (a string taken as an iterable would store one "part" per character, which no
    store could read back)."""
    if isinstance(value, str):
        return (TextPart(value),)
    parts = tuple(value)
    for n, part in enumerate(parts):
        if part.__class__ is not TextPart and not isinstance(part, _PART_TYPES):
            raise TypeError(
                f"Message content[{n}]: expected TextPart, ImagePart or ReasoningPart, "
                f"got {type(part).__name__}"
            )
    return parts


def _call_tuple(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    calls = tuple(value)
    for n, call in enumerate(calls):
        if not isinstance(call, ToolCall):
            raise TypeError(
                f"Message tool_calls[{n}]: expected ToolCall, got {type(call).__name__}"
            )
    return calls


def _now() -> datetime:
    return datetime.now(timezone.utc)


#: ``uuid.uuid4().hex``, from the pool of OS randomness (``_random``), without building a
#: ``UUID`` object (a message and a turn each take one)
_new_id = uuid4_hex


@attrs.frozen(weakref_slot=False)
class Message:
    """One message of a transcript.

    Build them with :meth:`user`, :meth:`assistant`, :meth:`tool` and :meth:`system`.
    ``is_error`` marks a tool result that reports a failure.
    """

    role: Role
    content: tuple[Part, ...] = attrs.field(default=(), converter=_part_tuple)
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_call_tuple)
    tool_call_id: str | None = None
    is_error: bool = False
    usage: Usage | None = None
    created_at: datetime = attrs.field(factory=_now)
    id: str = attrs.field(factory=_new_id)
    metadata: Mapping[str, Any] = attrs.field(default=EMPTY, converter=_frozen_mapping)
    extra: Mapping[str, Any] = attrs.field(
        default=EMPTY, converter=_frozen_mapping, repr=False, kw_only=True
    )

    @property
    def text(self) -> str:
        """The text parts joined together (reasoning is not text: see :attr:`reasoning`)."""
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def reasoning(self) -> str:
        """The visible text of the reasoning parts, joined together (often empty)."""
        return "".join(p.text for p in self.content if isinstance(p, ReasoningPart))

    @classmethod
    def user(cls, content: str | Sequence[Part], **kwargs: Any) -> Message:
        return cls("user", _parts(content), **kwargs)

    @classmethod
    def system(cls, content: str, **kwargs: Any) -> Message:
        return cls("system", _parts(content), **kwargs)

    @classmethod
    def assistant(
        cls,
        content: str | Sequence[Part] = "",
        *,
        tool_calls: Sequence[ToolCall] = (),
        usage: Usage | None = None,
        **kwargs: Any,
    ) -> Message:
        parts = _parts(content) if content else ()
        return cls("assistant", parts, tuple(tool_calls), usage=usage, **kwargs)

    @classmethod
    def tool(cls, call_id: str, output: str, is_error: bool = False, **kwargs: Any) -> Message:
        return cls("tool", (TextPart(output),), tool_call_id=call_id, is_error=is_error, **kwargs)
