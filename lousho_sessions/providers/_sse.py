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

Feed it bytes as they arrive (:meth:`SSEDecoder.feed`) or already split lines
(:meth:`SSEDecoder.feed_line`); chunk boundaries never change the events.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator

import attrs

__all__ = ["SSEDecoder", "ServerSentEvent", "iter_events"]

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
        "_event",
        "_last_id",
        "_retry",
        "_skip_lf",
        "_tail",
        "_utf8",
    )

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._tail = ""  # text after the last line end seen
        self._at_start = True  # no character seen yet: a BOM may come
        self._skip_lf = False  # the last line ended with CR: a LF next is part of it
        self._data: list[str] = []
        self._event = ""
        self._last_id = ""
        self._retry: int | None = None

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
        buffer = self._tail + text if self._tail else text
        if "\r" in buffer:
            lines = _LINE_END.split(buffer)
            self._skip_lf = buffer.endswith("\r")
        else:
            lines = buffer.split("\n")
        self._tail = lines.pop()
        events: list[ServerSentEvent] = []
        for line in lines:
            event = self.feed_line(line)
            if event is not None:
                events.append(event)
        return events

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
        self._tail = ""
        self._data = []
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
        if not data:
            return None
        return ServerSentEvent(
            data="\n".join(data), event=event or "message", id=self._last_id, retry=retry
        )


def iter_events(chunks: Iterable[bytes]) -> Iterator[ServerSentEvent]:
    """Decode a whole stream given as byte chunks."""
    decoder = SSEDecoder()
    for chunk in chunks:
        yield from decoder.feed(chunk)
    yield from decoder.close()
