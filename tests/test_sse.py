"""The SSE decoder against the WHATWG event-stream rules, and chunking invariance."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lousho_sessions.errors import ProviderError
from lousho_sessions.providers._sse import (
    DEFAULT_MAX_EVENT_SIZE,
    ServerSentEvent,
    SSEDecoder,
    iter_events,
)


def decode(data: bytes | str) -> list[ServerSentEvent]:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return list(iter_events([raw]))


def test_data_lines_join_with_lf_and_one_leading_space_is_dropped() -> None:
    assert decode("data: a\ndata:  b\ndata:c\n\n") == [ServerSentEvent("a\n b\nc")]


def test_event_name_defaults_to_message() -> None:
    events = decode("event: add\ndata: 1\n\ndata: 2\n\nevent:\ndata: 3\n\n")
    assert [(e.event, e.data) for e in events] == [("add", "1"), ("message", "2"), ("message", "3")]


def test_all_three_line_ends() -> None:
    expected = [ServerSentEvent("x", "e"), ServerSentEvent("y")]
    assert decode("event: e\r\ndata: x\r\n\r\ndata: y\r\n\r\n") == expected
    assert decode("event: e\rdata: x\r\rdata: y\r\r") == expected
    assert decode("event: e\ndata: x\n\ndata: y\n\n") == expected
    assert decode("event: e\r\ndata: x\r\rdata: y\n\n") == expected


def test_comments_and_unknown_fields_are_ignored() -> None:
    assert decode(": keep-alive\nfoo: bar\ndata: x\n: note\n\n") == [ServerSentEvent("x")]


def test_a_comment_alone_dispatches_nothing() -> None:
    assert decode(": ping\n\n") == []


def test_field_without_colon_has_empty_value() -> None:
    assert decode("data\n\n") == [ServerSentEvent("")]
    assert decode("data\ndata\n\n") == [ServerSentEvent("\n")]


def test_only_the_first_colon_splits() -> None:
    assert decode('data: {"a": "b:c"}\n\n') == [ServerSentEvent('{"a": "b:c"}')]


def test_block_without_data_is_not_dispatched_and_resets_the_name() -> None:
    assert decode("event: x\n\ndata: y\n\n") == [ServerSentEvent("y")]


def test_id_persists_and_nul_ids_are_ignored() -> None:
    events = decode("id: 7\ndata: a\n\ndata: b\n\nid: 8\x009\ndata: c\n\nid\ndata: d\n\n")
    assert [e.id for e in events] == ["7", "7", "7", ""]


def test_retry_only_when_all_ascii_digits() -> None:
    events = decode("retry: 1500\ndata: a\n\nretry: 15x\ndata: b\n\nretry: ¹\ndata: c\n\n")
    assert [e.retry for e in events] == [1500, None, None]


def test_leading_bom_is_dropped_once() -> None:
    assert decode(b"\xef\xbb\xbfdata: x\n\n") == [ServerSentEvent("x")]
    # a BOM that is not the first character is part of the field name
    assert decode(b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\n") == []


def test_unfinished_event_at_end_of_stream_is_dropped() -> None:
    assert decode("data: a\n\ndata: b\n") == [ServerSentEvent("a")]
    assert decode("data: a\n\ndata: b") == [ServerSentEvent("a")]


def test_pending_reports_a_started_event() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\n") == [ServerSentEvent("a")]
    assert not decoder.pending
    decoder.feed(b"data: b")
    assert decoder.pending
    assert decoder.close() == []
    assert not decoder.pending


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n\r") == [ServerSentEvent("a")]
    assert decoder.feed(b"\ndata: b\r\n\r\n") == [ServerSentEvent("b")]


def test_multibyte_character_split_across_chunks() -> None:
    raw = "data: ☀️ é\n\n".encode()
    decoder = SSEDecoder()
    events = [event for byte in raw for event in decoder.feed(bytes([byte]))]
    assert events == [ServerSentEvent("☀️ é")]


def test_invalid_utf8_is_replaced_not_raised() -> None:
    assert decode(b"data: \xff\n\n") == [ServerSentEvent("\ufffd")]


def test_feed_line_drives_the_same_rules() -> None:
    decoder = SSEDecoder()
    lines = ["event: e", "data: 1", "", ": c", "data: 2", ""]
    events = [e for line in lines if (e := decoder.feed_line(line)) is not None]
    assert events == [ServerSentEvent("1", "e"), ServerSentEvent("2")]


# --- linear work and the size limit -------------------------------------------------


@pytest.mark.parametrize("piece", [1024, 65536])
@pytest.mark.parametrize("crlf", [False, True])
def test_one_long_line_costs_work_linear_in_its_length(piece: int, crlf: bool) -> None:
    # 4 MiB in small pieces: re-searching or re-joining the buffered line on
    # every piece (the old cost) would count ~size**2 / (2 * piece) characters
    end = b"\r\n" if crlf else b"\n"
    size = 4 * 1024 * 1024
    data = b"data: " + b"x" * size + end + end
    decoder = SSEDecoder()
    events = [e for i in range(0, len(data), piece) for e in decoder.feed(data[i : i + piece])]
    assert [len(e.data) for e in events] == [size]
    assert decoder._scanned <= 3 * len(data)


def test_many_lines_cost_work_linear_in_their_total() -> None:
    data = b"".join(b"data: %d\n\n" % n for n in range(100_000))
    decoder = SSEDecoder()
    count = sum(len(decoder.feed(data[i : i + 4096])) for i in range(0, len(data), 4096))
    assert count == 100_000
    assert decoder._scanned <= 3 * len(data)


def test_a_line_over_the_default_limit_is_refused() -> None:
    assert DEFAULT_MAX_EVENT_SIZE == 16 * 1024 * 1024
    decoder = SSEDecoder()
    decoder.feed(b"data: ")
    with pytest.raises(ProviderError, match=r"longer than 16 MiB \(max_event_size=16777216\)"):
        for _ in range(17):
            decoder.feed(b"x" * (1024 * 1024))


def test_the_limit_counts_a_line_split_over_pieces_and_an_event_over_lines() -> None:
    decoder = SSEDecoder(max_event_size=10)
    assert decoder.feed(b"data:1234") == []
    assert decoder.feed(b"5") == []  # ten characters: still within the limit
    with pytest.raises(ProviderError, match="line longer than 10 characters"):
        decoder.feed(b"6")
    decoder = SSEDecoder(max_event_size=10)
    with pytest.raises(ProviderError, match="event longer than 10 characters"):
        decoder.feed(b"data:12345\ndata:67890\n")
    assert SSEDecoder(max_event_size=10).feed(b"data:12345\ndata:6789\n\n") == [
        ServerSentEvent("12345\n6789")
    ]
    assert SSEDecoder(max_event_size=None).feed(b"data: " + b"x" * 100 + b"\n\n")


# --- chunk boundaries never change the events ---------------------------------------

_values = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=12)
_line = st.one_of(
    st.builds(lambda v: f"data: {v}", _values),
    st.builds(lambda v: f"data:{v}", _values),
    st.just("data"),
    st.builds(lambda v: f"event: {v}", _values),
    st.builds(lambda v: f"id: {v}", _values),
    st.builds(lambda v: f"retry: {v}", st.from_regex(r"[0-9]{1,4}x?", fullmatch=True)),
    st.builds(lambda v: f": {v}", _values),
    st.just(""),
)
_ends = st.sampled_from(["\n", "\r", "\r\n"])


@st.composite
def _streams(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(_line, max_size=25))
    text = "".join(line + draw(_ends) for line in lines)
    bom = "\ufeff" if draw(st.booleans()) else ""
    return (bom + text).encode("utf-8")


@st.composite
def _splits(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    data = draw(_streams())
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    bounds = [0, *cuts, len(data)]
    return data, [data[a:b] for a, b in itertools.pairwise(bounds)]


@given(_splits())
def test_arbitrary_chunk_boundaries_give_the_same_events(case: tuple[bytes, list[bytes]]) -> None:
    data, chunks = case
    assert list(iter_events(chunks)) == decode(data)


@given(_streams())
def test_byte_by_byte_equals_whole(data: bytes) -> None:
    assert list(iter_events(data[i : i + 1] for i in range(len(data)))) == decode(data)


@given(st.lists(st.tuples(st.sampled_from(["", "add", "done"]), _values), max_size=10), _ends)
def test_encoded_events_round_trip(events: list[tuple[str, str]], end: str) -> None:
    text = "".join(
        (f"event: {name}{end}" if name else "") + f"data: {data}{end}{end}" for name, data in events
    )
    decoded = decode(text)
    assert [(e.event, e.data) for e in decoded] == [
        (name or "message", data) for name, data in events
    ]


@given(st.lists(_line, max_size=25))
def test_feed_gives_the_events_feed_line_gives(lines: list[str]) -> None:
    """``feed`` handles the commonest lines (data, event, the blank line) in its own loop;
    ``feed_line`` follows the rules line by line: the two agree on every stream."""
    by_line = SSEDecoder()
    expected = [e for line in lines if (e := by_line.feed_line(line)) is not None]
    assert SSEDecoder().feed("".join(line + "\n" for line in lines).encode("utf-8")) == expected


#: an event as model APIs send it (an ``event:`` line and a ``data:`` line, or a ``data:``
#: line alone), or any lines
_block = st.one_of(
    st.tuples(
        st.one_of(
            st.builds(lambda v: f"event: {v}", _values), st.builds(lambda v: f"event:{v}", _values)
        ),
        st.one_of(
            st.builds(lambda v: f"data: {v}", _values), st.builds(lambda v: f"data:{v}", _values)
        ),
    ).map(list),
    st.one_of(
        st.builds(lambda v: f"data: {v}", _values), st.builds(lambda v: f"data:{v}", _values)
    ).map(lambda line: [line]),
    st.lists(_line, max_size=4),
)


@given(st.lists(_block, min_size=1, max_size=8), st.lists(st.integers(0, 25), max_size=4))
def test_whole_events_fed_at_once_give_the_events_feed_line_gives(
    blocks: list[list[str]], cuts: list[int]
) -> None:
    """Text of whole events (LF line ends, each block ended by a blank line) takes the
    path that makes an ``event:``/``data:`` block at once; cut after any block, each piece
    is whole events too: every way gives what ``feed_line`` gives line by line."""
    pieces = ["".join(line + "\n" for line in [*block, ""]) for block in blocks]
    by_line = SSEDecoder()
    expected = [
        e for piece in pieces for line in piece.split("\n")[:-1] if (e := by_line.feed_line(line))
    ]
    decoder = SSEDecoder()
    ends = sorted({c % len(pieces) for c in cuts} | {len(pieces) - 1})
    got, start = [], 0
    for end in ends:
        got += decoder.feed("".join(pieces[start : end + 1]).encode())
        start = end + 1
    assert got == expected
