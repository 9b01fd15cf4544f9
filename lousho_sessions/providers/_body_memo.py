"""Request bodies in time proportional to what is new: the encoded transcript kept per session.

A session sends its whole transcript with every model call, and a call's transcript is
the previous call's with a few messages appended. Building and JSON-encoding every
message again costs milliseconds at a thousand messages, so a wire format keeps, per
session (``ModelRequest.session_id``), the JSON text of the turns it sent last time
(:class:`Memo`) and encodes only the *tail*: the messages from a point it chooses on.

The head is reused only while it is exactly what a fresh build would give:

- the new transcript starts with the same messages (the same objects, or equal ones:
  messages are frozen, so equal messages have the same wire form);
- the head ends before the turn the last memo turn is (the next message may join it)
  and before the first message whose wire form depends on where it stands in this
  call (Anthropic's ``cache_control`` marks, which move every call): the wire format
  names that message (``boundary``);
- what a message's wire form depends on beyond itself is kept with the memo and
  checked (Gemini's function names, looked up by call id), or kept in both forms
  (Gemini's signature placeholder, on the unsigned calls of the current turn only: the
  turns as sent and, beside them, those it marked as they are without it);
- what a call computes over the whole transcript is kept as far as the memo goes and
  extended over the new messages (the digest of what a stored OpenAI response saw).

The body around the transcript (model, system text, tools, settings: the *frame*) is kept
encoded with the memo too, with what it was made of (``frame_of``): a call whose request
has the same system text, tools, settings and output schema (equal, compared each call)
reuses it rather than building and encoding a few kilobytes again.

The body itself is kept too, in one buffer (:class:`Body`): the frame, then the turns,
each ending where the memo noted. A call cuts it where what it reuses ends and writes
only what follows (the turns after, the marked tail), so a call's work stays in
proportion to what is new at a thousand messages as at ten: no joining of the whole
body, no copy of the turn lists. It is sent as a view of that buffer; while any view
of it lives the buffer cannot be cut (Python refuses to resize it) and a call that
finds it so copies what it reuses into a new one.

Turns are stored without any per-call mark, or with both forms; the tail is built by
the same code that builds a whole body, so a body from the memo and one built afresh
are equal (a property test checks it). Memos are bounded (``LIMIT`` sessions, the oldest dropped
first). A call takes its session's memo out (:meth:`BodyMemos.head`) and puts the new
one back (:meth:`BodyMemos.keep`): what it took is its own, so it may extend the memo's
lists and buffer in place, and a call on another thread for the same session meanwhile
finds no memo and builds its body afresh.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import attrs

from ..messages import Message

__all__ = [
    "LIMIT",
    "Body",
    "BodyMemos",
    "Head",
    "Memo",
    "frame_of",
    "join",
    "opening",
    "splice",
    "write",
]

#: how many sessions' memos a provider keeps
LIMIT = 32


@attrs.frozen
class Memo:
    """What a session's last call sent: its messages and the JSON text of their turns.

    ``turns[i]`` is turn ``i`` as JSON (``b""``: a message that sent nothing), without
    any per-call mark; ``firsts[i]`` the index of its first message. ``state`` is the
    wire format's own (what a message's wire form depends on beyond itself).
    """

    messages: tuple[Message, ...]
    turns: list[bytes]
    firsts: list[int]
    state: Any = None
    #: ``(parts, value)``: the wire format's encoded frame and what it was made of
    frame: tuple[tuple[Any, ...], Any] | None = None
    #: the body this call sent, for the next to cut and extend (see :func:`write`)
    body: Body | None = None


def frame_of(memo: Memo | None, parts: tuple[Any, ...]) -> Any:
    """The encoded frame ``memo`` keeps if it was made of ``parts`` (each equal), else None."""
    if memo is None or memo.frame is None:
        return None
    kept, value = memo.frame
    return value if kept == parts else None


@attrs.frozen
class Head:
    """The turns reused for a call: the memo's first ``count``, from messages before ``start``."""

    start: int
    count: int
    memo: Memo | None

    @property
    def turns(self) -> list[bytes]:
        """The reused turns (a copy)."""
        return [] if self.memo is None else self.memo.turns[: self.count]


_NONE = Head(0, 0, None)


class BodyMemos:
    """A provider's memos, by session; at most ``limit``, the oldest dropped first."""

    def __init__(self, limit: int = LIMIT) -> None:
        self._limit = limit
        self._memos: dict[Hashable, Memo] = {}
        self._lock = threading.Lock()

    def head(self, key: Hashable, messages: Sequence[Message], boundary: int) -> Head:
        """The memo's turns that ``messages`` can reuse: those ending before the last
        memo turn and before message ``boundary``; none when ``messages`` does not start
        with the memo's messages. The memo is taken out: it is the caller's to change and
        to :meth:`keep` (changed or not) once the call's body is made."""
        with self._lock:
            memo = self._memos.pop(key, None)
        if memo is None or not memo.turns:
            return _NONE
        if not _starts_with(messages, memo.messages):
            return _NONE
        # the turn holding ``boundary`` (never past the last one, which may grow)
        turn = min(bisect_right(memo.firsts, boundary), len(memo.turns)) - 1
        if turn <= 0:
            return Head(0, 0, memo)
        return Head(memo.firsts[turn], turn, memo)

    def extend(
        self,
        key: Hashable,
        head: Head,
        messages: tuple[Message, ...],
        front: bytes,
        turns: list[bytes],
        firsts: Iterable[int],
        *,
        lead: Sequence[bytes] = (),
        sent: Sequence[bytes] | None = None,
        state: Any = None,
        frame: tuple[tuple[Any, ...], Any] | None = None,
        same: int | None = None,
        by_value: bool = False,
    ) -> memoryview:
        """This call's body: ``front``, ``lead``, the memo's first ``head.count`` turns, then
        the new ``turns`` (or ``sent``, this call's form of them, which a next call does not
        reuse), written into the buffer of ``head``'s memo (:func:`write`, with ``same`` and
        ``by_value``). The memo's turns and their first messages are extended in place with
        ``turns`` and ``firsts`` (it is this call's own: see :meth:`head`), and kept with
        ``state`` and ``frame`` for the session's next call."""
        memo, count = head.memo, head.count
        kept: list[bytes] = [] if memo is None else memo.turns
        kept_firsts: list[int] = [] if memo is None else memo.firsts
        stable = [(lead, len(lead)), (kept, count)]
        if sent is None:
            stable.append((turns, len(turns)))
        previous = None if memo is None else memo.body
        written, data = write(previous, front, stable, sent or (), same, by_value=by_value)
        del kept[count:], kept_firsts[count:]
        kept += turns
        kept_firsts += firsts
        self.keep(key, Memo(messages, kept, kept_firsts, state, frame, written))
        return data

    def keep(self, key: Hashable, memo: Memo) -> None:
        with self._lock:
            self._memos.pop(key, None)
            self._memos[key] = memo
            while len(self._memos) > self._limit:
                del self._memos[next(iter(self._memos))]

    def clear(self) -> None:
        with self._lock:
            self._memos.clear()


def splice(
    encode: Callable[[Any], bytes],
    body: dict[str, Any],
    key: str,
    items: list[bytes],
    *,
    gaps: bool = False,
) -> bytes:
    """``body`` (which has no ``key``) encoded with the JSON array of ``items`` (values
    already encoded; a list this may change) as the value of ``key``: the last member,
    as the order of an object's members means nothing. ``gaps``: some items are empty
    (left out). The array is copied once."""
    return join(opening(encode, body, key), items, gaps=gaps)


def opening(encode: Callable[[Any], bytes], body: dict[str, Any], key: str) -> bytes:
    """``body`` (which has no ``key``) encoded up to the opening of ``key``'s array."""
    data = encode(body)
    return data[:-1] + (b"," if len(data) > 2 else b"") + encode(key) + b":["


def join(opening: bytes, items: list[bytes], *, gaps: bool = False) -> bytes:
    """The body whose ``opening`` (see ``opening``) ``items`` complete (``splice``)."""
    if gaps:
        items = list(filter(None, items))
    if not items:
        return opening + b"]}"
    # one join, commas between the items only: the brackets go onto the first and last
    items[0] = opening + items[0]
    items[-1] = items[-1] + b"]}"
    return b",".join(items)


def _starts_with(messages: Sequence[Message], known: tuple[Message, ...]) -> bool:
    """Whether ``messages`` starts with ``known`` (the same messages, or equal ones)."""
    if type(messages) is tuple:
        # a tuple compares item by item (the same object is equal without a look at it) and
        # then by length, so ``<=`` tells a prefix without copying a slice of a thousand
        # messages; messages have no order, so a difference before the end raises
        try:
            return known <= messages
        except TypeError:
            return False
    return len(messages) >= len(known) and tuple(messages[: len(known)]) == known


class Body:
    """A call's body in one buffer: ``front`` (the frame up to the opening of the turns'
    array), the items joined by commas, ``]}``; ``ends[i]``: where item ``i`` of the ones
    a next call may reuse ends (an empty item, left out, ends where the one before does)."""

    __slots__ = ("data", "ends", "front")

    def __init__(self, front: bytes) -> None:
        self.data = bytearray(front)
        self.front = front
        self.ends: list[int] = []


def write(
    body: Body | None,
    front: bytes,
    stable: Sequence[tuple[Sequence[bytes], int]],
    tail: Sequence[bytes] = (),
    same: int | None = None,
    *,
    by_value: bool = False,
) -> tuple[Body, memoryview]:
    """The body of ``front``, the items of ``stable`` (each ``(items, n)``: the first ``n``
    of ``items``) and those of ``tail``, empty items left out, written into ``body`` (the
    previous call's, when its memo was this call's: its items are the first of ``stable``,
    as many as it has ends, or as ``same`` says) from where the items they share end: the
    body and a view of its bytes. A next call may reuse the items of ``stable``, not those
    of ``tail``. ``body`` is kept when its front is ``front`` (the same object: the wire's
    frame memo gave it, with the items that follow it), or ``by_value`` an equal one (a
    wire that encodes its frame each call, all of whose items are in ``stable``)."""
    if body is not None and by_value and body.front == front:
        front = body.front
    reuse = 0
    if body is not None and body.front is front:
        reuse = min(len(body.ends), sum(n for _, n in stable))
        if same is not None:
            reuse = min(reuse, same)
        end = body.ends[reuse - 1] if reuse else len(front)
        try:
            del body.data[end:]
        except BufferError:  # a view of the last body still lives: leave it be
            body.data = body.data[:end]
        del body.ends[reuse:]
    else:
        body = Body(front)
    data, ends, bare = body.data, body.ends, len(front)
    skip = reuse
    for items, n in stable:
        if skip >= n:
            skip -= n
            continue
        for at in range(skip, n):  # only what the last body did not hold
            item = items[at]
            if item:
                if len(data) > bare:
                    data += b","
                data += item
            ends.append(len(data))
        skip = 0
    for item in tail:
        if item:
            if len(data) > bare:
                data += b","
            data += item
    data += b"]}"
    return body, memoryview(data)
