"""The direct HTTP path reads any framing of a response as ``http.client`` does, however
its bytes arrive.

``providers._direct`` reads a response's head and chunked body with fast paths for what
is buffered whole (all the header lines at once, every complete chunk at once) and a
careful path, line by line, for the rest. Hypothesis writes responses (headers with
folded lines and repeats, chunks with and without extensions, trailers, bare-LF heads),
sends them through a real socket pair in random pieces, and compares what is read with
``http.client.HTTPResponse`` reading the same bytes.
"""

from __future__ import annotations

import http.client
import io
import itertools
import socket
import threading
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lousho_sessions.providers._direct import DirectConnection, DirectResponse

NAME = st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12)
VALUE = st.text("abcdefghijklmnopqrstuvwxyz0123456789 ;=/.,", max_size=30).map(str.strip)
CHUNK = st.binary(min_size=1, max_size=300)


@st.composite
def responses(draw: Any) -> bytes:
    """An HTTP/1.1 200 response with a chunked body, as servers write them."""
    eol = draw(st.sampled_from([b"\r\n", b"\r\n", b"\r\n", b"\n"]))  # mostly CRLF
    headers = draw(st.lists(st.tuples(NAME, VALUE), max_size=25))
    lines = [b"HTTP/1.1 200 OK"]
    for name, value in headers:
        if name.startswith("transfer") or name.startswith("content"):
            continue
        lines.append(f"{name}: {value}".encode("latin-1"))
        if draw(st.integers(0, 9)) == 0:
            lines.append(b"  folded " + value.encode("latin-1"))  # obsolete line folding
    lines.append(b"Transfer-Encoding: chunked")
    head = eol.join(lines) + eol + eol
    body = b""
    for chunk in draw(st.lists(CHUNK, max_size=12)):
        size = b"%x" % len(chunk)
        if draw(st.integers(0, 7)) == 0:
            size += b";ext=1"
        if draw(st.integers(0, 7)) == 0:
            size = b"0" + size.upper()
        body += size + b"\r\n" + chunk + b"\r\n"
    body += b"0\r\n"
    if draw(st.booleans()):
        body += b"X-Trailer: t\r\n"
    response: bytes = head + body + b"\r\n"
    return response


class _Conn:
    """What ``DirectConnection`` needs of urllib3's connection: the socket, ``close``."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def close(self) -> None:
        self.sock.close()


class _Route:
    def release(self, connection: DirectConnection) -> None:
        connection.close()


def read_direct(raw: bytes, cuts: list[int]) -> tuple[int, dict[str, str], bytes]:
    """``raw`` sent through a socket pair in pieces cut at ``cuts``, read by ``_direct``."""
    reader, writer = socket.socketpair()
    reader.settimeout(10)
    bounds = [0, *sorted({c % (len(raw) + 1) for c in cuts}), len(raw)]

    def send() -> None:
        for start, end in itertools.pairwise(bounds):
            if end > start:
                writer.sendall(raw[start:end])

    sender = threading.Thread(target=send)
    sender.start()
    try:
        connection = DirectConnection(_Conn(reader))
        connection.wait = 10  # a read never waits longer
        response = DirectResponse.read_head(connection, _Route())  # type: ignore[arg-type]
        pieces = list(response.chunks())
        response.close()
    finally:
        sender.join(10)
        writer.close()
        reader.close()
    return response.status, response.headers, b"".join(pieces)


def read_reference(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """The same bytes read by ``http.client``."""

    class Sock:
        def makefile(self, mode: str) -> io.BytesIO:
            return io.BytesIO(raw)

    response = http.client.HTTPResponse(Sock())  # type: ignore[arg-type]
    response.begin()
    headers: dict[str, str] = {}
    for name, value in response.getheaders():
        key = name.lower()
        value = " ".join(value.split())  # folded lines joined by a space either way
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return response.status, headers, response.read()


@settings(max_examples=150)
@given(raw=responses(), cuts=st.lists(st.integers(0, 10_000), max_size=6))
def test_a_response_is_read_as_http_client_reads_it(raw: bytes, cuts: list[int]) -> None:
    status, headers, body = read_direct(raw, cuts)
    expected_status, expected_headers, expected_body = read_reference(raw)
    assert status == expected_status
    assert body == expected_body
    normalised = {k: " ".join(v.split()) for k, v in headers.items()}
    assert normalised == {k: " ".join(v.split()) for k, v in expected_headers.items()}


def test_whole_chunks_stops_where_the_careful_path_must_judge() -> None:
    """Complete plain chunks are taken; a chunk with an extension, a bad size, a missing
    line end or the last chunk is left for ``_chunked``."""
    for rest in (b"3;x=1\r\nabc\r\n", b"zz\r\n", b"3\r\nabcX\r\n", b"0\r\n\r\n", b"3\r\nab"):
        reader, writer = socket.socketpair()
        connection = DirectConnection(_Conn(reader))
        connection.buffer = b"2\r\nhi\r\n" + rest
        pieces: list[bytes] = []
        connection.whole_chunks(pieces)
        assert pieces == [b"hi"] and connection.buffer[connection.at :] == rest
        reader.close()
        writer.close()
