"""A pure decoder for ``text/event-stream`` (server-sent events); no I/O.

It follows the WHATWG HTML "event stream interpretation" rules: UTF-8 with one
leading byte order mark ignored; lines end with CRLF, LF or CR (a CRLF split
across two chunks is one line end); ``:`` starts a comment; a field's value
loses one leading space; ``data`` lines join with LF; ``event`` names the event
(``"message"`` when absent or empty); ``id`` sets the last event id (kept for
the events after it, ignored when it holds NUL); ``retry`` is kept only when it
is all ASCII digits; unknown fields are ignored; a blank line dispatches the
event unless it has no ``data``; an event not ended by a blank line when the
stream ends is dropped.

Work is linear in the input: each chunk is searched for line ends once, and a
line that spans many chunks is kept as pieces and joined once, when it ends.
A line, or the ``data`` of one event, longer than ``max_event_size``
characters (16 MiB by default; ``None`` for no limit) raises
:class:`~lousho_sessions.errors.ProviderError` naming the limit, so a hostile
or runaway stream cannot grow memory without end.

Feed it bytes as they arrive (:meth:`SSEDecoder.feed`) or already split lines
(:meth:`SSEDecoder.feed_line`); chunk boundaries never change the events.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator

import attrs

from ..errors import ProviderError

__all__ = ["DEFAULT_MAX_EVENT_SIZE", "SSEDecoder", "ServerSentEvent", "iter_events"]

#: The longest line or event ``data`` accepted, in characters.
DEFAULT_MAX_EVENT_SIZE = 16 * 1024 * 1024

_LINE_END = re.compile(r"\r\n|\r|\n")


@attrs.frozen
class ServerSentEvent:
    """One dispatched event.

    ``id`` is the last event id seen so far in the stream (possibly set by an
    earlier event); ``retry`` is the reconnection time in milliseconds set by
    this event's block, if any.
    """

    data: str
    event: str = "message"
    id: str = ""
    retry: int | None = None


class SSEDecoder:
    """Turns an event stream into :class:`ServerSentEvent` objects, incrementally.

    One decoder per stream; it is not thread-safe. Mixing :meth:`feed` and
    :meth:`feed_line` on one decoder is not supported.
    """

    __slots__ = (
        "_at_start",
        "_data",
        "_data_size",
        "_event",
        "_last_id",
        "_limit",
        "_retry",
        "_scanned",
        "_skip_lf",
        "_tail",
        "_tail_size",
        "_utf8",
    )

    def __init__(self, max_event_size: int | None = DEFAULT_MAX_EVENT_SIZE) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._limit = max_event_size
        self._tail: list[str] = []  # pieces of the line not ended yet
        self._tail_size = 0
        self._at_start = True  # no character seen yet: a BOM may come
        self._skip_lf = False  # the last line ended with CR: a LF next is part of it
        self._data: list[str] = []
        self._data_size = 0
        self._event = ""
        self._last_id = ""
        self._retry: int | None = None
        self._scanned = 0  # characters searched or copied: stays linear in the input

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Decode ``chunk`` (any number of bytes) and return the events it completes."""
        return self.feed_text(self._utf8.decode(chunk))

    def feed_text(self, text: str) -> list[ServerSentEvent]:
        """Like :meth:`feed` for already decoded text."""
        if not text:
            return []
        if self._at_start:
            self._at_start = False
            if text[0] == "\ufeff":
                text = text[1:]
        if self._skip_lf and text:
            self._skip_lf = False
            if text[0] == "\n":
                text = text[1:]
        if not text:
            return []
        # only the new text is searched: the tail was searched when it came
        self._scanned += len(text)
        if (
            text.endswith("\n\n")  # whole events, and nothing of one before them
            and not self._tail
            and not self._data
            and not self._event
            and self._retry is None
            and "\r" not in text
            and (self._limit is None or len(text) <= self._limit)  # no line, no event over
        ):
            return self._blocks(text)
        if "\r" in text:
            lines = _LINE_END.split(text)
            self._skip_lf = text.endswith("\r")
        else:
            lines = text.split("\n")
        rest = lines.pop()
        if not lines:
            self._keep(rest)
            return []
        if self._tail:
            self._tail.append(lines[0])
            lines[0] = "".join(self._tail)
            self._scanned += len(lines[0])
            self._tail, self._tail_size = [], 0
        if rest:
            self._keep(rest)
        events: list[ServerSentEvent] = []
        self._lines(lines, events)
        return events

    def _blocks(self, text: str) -> list[ServerSentEvent]:
        """Whole events, LF-ended, none pending before them: an ``event:`` line and a
        ``data:`` line, or a ``data:`` line alone (what model APIs send), made at once, any
        other block line by line as ``feed_text`` reads it."""
        events: list[ServerSentEvent] = []
        for block in text[:-2].split("\n\n"):
            kind, newline, data = block.partition("\n")
            if (
                newline
                and kind.startswith("event:")
                and data.startswith("data:")
                and "\n" not in data
            ):
                kind = kind[7:] if kind[6:7] == " " else kind[6:]
                events.append(
                    ServerSentEvent(
                        data[6:] if data[5:6] == " " else data[5:],
                        kind or "message",
                        self._last_id,
                        None,
                    )
                )
            elif not newline and kind.startswith("data:"):  # a ``data:`` line alone
                events.append(
                    ServerSentEvent(
                        kind[6:] if kind[5:6] == " " else kind[5:], "message", self._last_id, None
                    )
                )
            else:
                self._lines([*block.split("\n"), ""], events)
        return events

    def _lines(self, lines: list[str], events: list[ServerSentEvent]) -> None:
        """Process whole ``lines``; add the events they dispatch to ``events``."""
        limit = self._limit
        for line in lines:
            if limit is not None and len(line) > limit:
                self._check(len(line), "line")
            if not line:  # ``_dispatch``, inline
                data = self._data
                if data:
                    events.append(
                        ServerSentEvent(
                            data[0] if len(data) == 1 else "\n".join(data),
                            self._event or "message",
                            self._last_id,
                            self._retry,
                        )
                    )
                    self._data, self._data_size = [], 0
                self._event, self._retry = "", None
            elif line.startswith("data:"):  # ``feed_line``'s commonest cases, inline
                value = line[6:] if line[5:6] == " " else line[5:]
                self._data_size += len(value) + 1
                if limit is not None and self._data_size - 1 > limit:
                    self._check(self._data_size - 1, "event")
                self._data.append(value)
            elif line.startswith("event:"):
                self._event = line[7:] if line[6:7] == " " else line[6:]
            else:
                self.feed_line(line)  # a blank line is handled above: this dispatches nothing

    def _keep(self, piece: str) -> None:
        self._tail.append(piece)
        self._tail_size += len(piece)
        self._check(self._tail_size, "line")

    def _check(self, size: int, what: str) -> None:
        if self._limit is not None and size > self._limit:
            raise ProviderError(
                None,
                f"the event stream sent a {what} longer than {_size(self._limit)} "
                f"(max_event_size={self._limit}); nothing more was read",
                retryable=False,
            )

    def feed_line(self, line: str) -> ServerSentEvent | None:
        """Process one line (without its line end); return the event a blank line dispatches."""
        if not line:
            return self._dispatch()
        if line[0] == ":":
            return None
        field, _, value = line.partition(":")
        if value[:1] == " ":
            value = value[1:]
        if field == "data":
            self._data_size += len(value) + 1
            self._check(self._data_size - 1, "event")
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            if "\0" not in value:
                self._last_id = value
        elif field == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
        return None

    def close(self) -> list[ServerSentEvent]:
        """End of stream: flush the decoder; an event without its blank line is dropped.

        Always returns an empty list (kept for symmetry with :meth:`feed`); the
        decoder is reset and can read a new stream.
        """
        rest = self._utf8.decode(b"", final=True)
        if rest:
            self.feed_text(rest)
        self._tail, self._tail_size = [], 0
        self._data, self._data_size = [], 0
        self._event = ""
        self._retry = None
        self._at_start = True
        self._skip_lf = False
        return []

    @property
    def pending(self) -> bool:
        """Whether a started but undispatched event (or partial line) is buffered."""
        return bool(self._tail or self._data or self._event)

    def _dispatch(self) -> ServerSentEvent | None:
        data, event, retry = self._data, self._event, self._retry
        self._data, self._event, self._retry = [], "", None
        self._data_size = 0
        if not data:
            return None
        return ServerSentEvent(
            data="\n".join(data), event=event or "message", id=self._last_id, retry=retry
        )


def _size(limit: int) -> str:
    if limit >= 1024 * 1024 and limit % (1024 * 1024) == 0:
        return f"{limit // (1024 * 1024)} MiB"
    return f"{limit} characters"


def iter_events(chunks: Iterable[bytes]) -> Iterator[ServerSentEvent]:
    """Decode a whole stream given as byte chunks."""
    decoder = SSEDecoder()
    for chunk in chunks:
        yield from decoder.feed(chunk)
    yield from decoder.close()
