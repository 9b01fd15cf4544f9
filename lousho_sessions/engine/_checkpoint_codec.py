"""The checkpoint codec: a ``TurnState`` as the JSON a checkpoint store keeps, and back.

The engine owns the checkpoint format (``_turn_state.CHECKPOINT_VERSION``), so its codec
lives here rather than in ``serde``; importing this module registers ``TurnState`` on
``serde.converter``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from .._kept_json import EncodedObject
from .._message_codec import usage_dict
from ..errors import SchemaVersionError, StoreCorruptError
from ..messages import Message, Usage
from ..serde import _describe, converter, kept_message_json, message_to_dict, to_json
from ._turn_state import CHECKPOINT_FORMAT, CHECKPOINT_VERSION, TurnState, now_iso

__all__ = [
    "splice_object",
    "turn_checkpoint",
    "turn_message_dict",
    "turn_message_texts",
    "turn_state_from_checkpoint",
]

#: Checkpoint keys that are not ``TurnState`` fields: written, checked, not kept.
_CHECKPOINT_KEYS = frozenset({"format", "version", "updated_at"})
#: Fields a previous release read leniently: a null one takes the field's default.
_NULL_IS_DEFAULT = ("results", "decisions", "queued", "usage", "created_at", "started")
_TURN_FIELDS = frozenset(
    a.name for a in attrs.fields(TurnState) if a.init and a.name not in ("history", "extra")
)
_turn_fields_unstructure = make_dict_unstructure_fn(
    TurnState,
    converter,
    history=override(omit=True),
    new=override(omit=True),  # messages are converted once each, through the state's cache
    results=override(omit=True),
    extra=override(omit=True),
)


def _turn_fields(state: TurnState) -> dict[str, Any]:
    """The checkpoint fields of ``state`` but its messages, as ``converter`` writes them; written
    out for the common turn (no decisions, no queued input): two saves a turn, no dispatch."""
    usage = state.usage
    if state.decisions or state.queued or type(usage) is not Usage:
        return _turn_fields_unstructure(state)
    return {
        "run_id": state.run_id,
        "session_id": state.session_id,
        "turn_id": state.turn_id,
        "base_length": state.base_length,
        "base_last_id": state.base_last_id,
        "status": state.status,
        "approval_id": state.approval_id,
        "decisions": {},
        "steps": state.steps,
        "tool_calls": state.tool_calls,
        # as ``converter`` writes it: the message codec's (tests/test_serde.py compares them)
        "usage": usage_dict(usage),
        "queued": [],
        "created_at": state.created_at,
        "attempts": state.attempts,
        "started": list(state.started),
        "fence": state.fence,
    }


_turn_fields_structure = make_dict_structure_fn(
    TurnState, converter, history=override(omit=True), extra=override(omit=True)
)


def turn_checkpoint(
    state: TurnState, *, encoded: bool = False, fence: bool = True
) -> dict[str, Any]:
    """The checkpoint of ``state``: a JSON-able dict (``format``, ``version``, its fields).

    ``history`` is left out (the session store holds it); fields a newer release wrote
    (``state.extra``) are written back. Each message is converted once and the dict
    kept in ``state.message_dicts``, so saving again costs only the new messages' work.
    ``encoded`` (for a store that encodes with ``serde.to_json``): an ``EncodedObject``
    whose text is made of the fields' and each message's kept text (``kept_message_json``),
    so a message is encoded once however often it is saved. ``fence=False``: without the
    ``"fence"`` field (a first checkpoint the store saves with the lease's fence).
    """
    data: dict[str, Any] = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION}
    data.update(_turn_fields(state))
    if not fence:
        del data["fence"]
    splice = encoded and not state.extra
    head = to_json(data, what=f"checkpoint {state.turn_id!r}") if splice else ""
    data["new"] = [turn_message_dict(state, m) for m in state.new]
    data["results"] = {k: turn_message_dict(state, m) for k, m in state.results.items()}
    data["updated_at"] = now_iso()
    if splice:
        new = turn_message_texts(state, state.new)
        results = turn_message_texts(state, state.results.values())
        if new is not None and results is not None:
            spliced = splice_object(zip(state.results, results, strict=True))
            if spliced is not None:
                text = (
                    f'{head[:-1]},"new":[{",".join(new)}],"results":{spliced},'
                    f'"updated_at":"{data["updated_at"]}"}}'
                )
                return EncodedObject(data, text)
    for key, value in state.extra.items():
        data.setdefault(key, value)
    return data


def splice_object(items: Iterable[tuple[Any, str]]) -> str | None:
    """The JSON object of ``items``, each a key and its value's JSON text (``None`` if a key
    is not a string)."""
    parts = []
    for key, text in items:
        if type(key) is not str:
            return None
        parts.append(f"{to_json(key, what='a key')}:{text}")
    return "{" + ",".join(parts) + "}"


def turn_message_texts(state: TurnState, messages: Iterable[Message]) -> list[str] | None:
    """Each message's kept text (``kept_message_json`` of its ``turn_message_dict``);
    ``None`` if one must be checked in the record that holds it."""
    out = []
    for message in messages:
        text = kept_message_json(message, turn_message_dict(state, message))
        if text is None:
            return None
        out.append(text)
    return out


def turn_message_dict(state: TurnState, message: Message) -> dict[str, Any]:
    """``message`` as a checkpoint of ``state`` holds it, converted once (``message_dicts``)."""
    cached = state.message_dicts.get(id(message))
    if cached is None or cached[0] is not message:
        cached = state.message_dicts[id(message)] = (message, message_to_dict(message))
    return cached[1]


def turn_state_from_checkpoint(data: Any, history: Sequence[Message], *, source: str) -> TurnState:
    """The turn ``data`` (a checkpoint) describes, on top of ``history``.

    ``StoreCorruptError`` naming ``source`` for anything that is not a readable
    checkpoint; ``SchemaVersionError`` for one written by a newer format version.
    """
    if not isinstance(data, Mapping):
        raise StoreCorruptError(f"{source}: not a lousho turn checkpoint ({type(data).__name__})")
    version = data.get("version")
    if data.get("format") != CHECKPOINT_FORMAT or not isinstance(version, int):
        raise StoreCorruptError(f"{source}: not a lousho turn checkpoint")
    if version > CHECKPOINT_VERSION:
        raise SchemaVersionError(
            f"{source}: checkpoint version {version} is newer than this release reads "
            f"({CHECKPOINT_VERSION})"
        )
    try:
        state: TurnState = converter.structure(data, TurnState)
    except Exception as exc:  # cattrs raises several types; callers want one
        raise StoreCorruptError(f"{source}: cannot read checkpoint: {_describe(exc)}") from exc
    state.history = tuple(history)
    if "base_length" not in data:
        state.base_length = len(history)
    return state


def _structure_turn_state(data: Mapping[str, Any], _: Any) -> TurnState:
    if not isinstance(data, Mapping):
        raise TypeError(f"expected an object for TurnState, got {type(data).__name__}")
    known = {
        k: v
        for k, v in data.items()
        if k in _TURN_FIELDS and not (v is None and k in _NULL_IS_DEFAULT)
    }
    state: TurnState = _turn_fields_structure(known, TurnState)
    state.extra = {k: v for k, v in data.items() if k not in _TURN_FIELDS | _CHECKPOINT_KEYS}
    return state


converter.register_unstructure_hook(TurnState, turn_checkpoint)
converter.register_structure_hook(TurnState, _structure_turn_state)
