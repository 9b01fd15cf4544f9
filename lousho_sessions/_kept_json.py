"""JSON text made once and used again: records given with their text, and message texts kept.

A turn saves the same messages several times: its user message in each of its checkpoints,
each message again in the transcript when it commits. The engine makes a message's stored
JSON text once (``serde.kept_message_json``) and builds a checkpoint's text from those texts;
it hands the store an ``EncodedObject``, a dict that carries its text, for which
``serde.to_json`` returns that text instead of encoding the dict again. The texts are kept
here by message identity (a message is frozen, so its text does not change; each is held,
so its ``id`` is not reused while it is here), at most ``KEPT_LIMIT``, the oldest forgotten
first, so ``serde.message_json`` finds them when the turn commits. A message a store encoded
inside a whole checkpoint is held here without a text (``note_valid``): it is known to encode,
so the memory store, which only checks what it is given, need not encode it again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from .messages import Message

__all__ = ["KEPT_LIMIT", "EncodedObject", "keep_text", "kept_text", "note_valid"]

#: how many message texts are kept (a turn needs a few; many turns at once share these)
KEPT_LIMIT = 64

#: ``(message, text, shallow)`` by ``id(message)``; ``text`` ``None``: known to encode only
Kept = tuple[Message, "str | None", bool]

_kept: dict[int, Kept] = {}
_lock = threading.Lock()


def kept_text(message: Message) -> Kept | None:
    """``(message, text, shallow)`` if ``message`` is held (``text`` ``None``: only known to
    encode), else ``None``."""
    hit = _kept.get(id(message))
    return hit if hit is not None and hit[0] is message else None


def keep_text(message: Message, text: str, shallow: bool) -> Kept:
    """Keep ``text``, ``message``'s stored JSON; ``shallow``: nested little enough to be spliced
    into a record without checking the record's depth again."""
    kept = (message, text, shallow)
    with _lock:
        _kept[id(message)] = kept
        _forget_oldest()
    return kept


def note_valid(messages: Iterable[Message]) -> None:
    """Hold ``messages`` as known to encode (a store encoded them), those not held already."""
    with _lock:
        for message in messages:
            if kept_text(message) is None:
                _kept[id(message)] = (message, None, False)
        _forget_oldest()


def _forget_oldest() -> None:
    while len(_kept) > KEPT_LIMIT:
        del _kept[next(iter(_kept))]


class EncodedObject(dict[str, Any]):
    """A JSON object whose compact text (what ``serde.to_json`` makes of it) is made already:
    ``to_json`` returns ``text``. Changing it in place drops the text (``None``): it is then
    encoded as any dict is."""

    __slots__ = ("text",)

    def __init__(self, data: Any = (), text: str | None = None) -> None:
        super().__init__(data)
        self.text = text

    def __setitem__(self, key: str, value: Any) -> None:
        self.text = None
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self.text = None
        super().__delitem__(key)

    def __ior__(self, other: Any) -> EncodedObject:  # type: ignore[override,misc]
        self.text = None
        super().__ior__(other)
        return self

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.text = None
        super().update(*args, **kwargs)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self.text = None
        return super().setdefault(key, default)

    def pop(self, key: str, *default: Any) -> Any:
        self.text = None
        return super().pop(key, *default)

    def popitem(self) -> tuple[str, Any]:
        self.text = None
        return super().popitem()

    def clear(self) -> None:
        self.text = None
        super().clear()
