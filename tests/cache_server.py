"""A loopback model server that reports prompt-cache hits by each vendor's documented rules.

``CacheServer`` speaks the Anthropic Messages and OpenAI Chat Completions wire formats
(``POST /v1/messages``, ``POST /v1/chat/completions``) and keeps a prompt cache the way
each vendor documents it, so a test or benchmark can see what a client's requests would
read from the cache:

- Anthropic: a request's prefix (tools, system, messages, block by block) is written at
  each block marked ``cache_control`` (at least ``min_tokens`` long); a request reads the
  longest cached prefix ending at one of its marks or within ``LOOKBACK`` (20) blocks
  before one. Usage reports ``input_tokens`` (after the last mark),
  ``cache_creation_input_tokens`` (from the read point to the last mark, split by TTL in
  ``cache_creation``) and ``cache_read_input_tokens``. Nothing is cached without marks.
- OpenAI: every request is cached automatically in prefixes of at least 1,024 tokens, in
  128-token steps; ``prompt_tokens`` counts the whole prompt and
  ``prompt_tokens_details.cached_tokens`` the longest cached prefix.

Tokens are counted as one per four characters of each block's JSON (cache fields left
out), which is all the rules need. The model's reply is chosen by ``reply``: by default a
call of ``tool_name`` after a user message and a final text after a tool result.

For a benchmark timing the client, each request is stamped with ``time.perf_counter()``
(the machine's monotonic clock, the same in every process): ``received`` as soon as its
request line has been read (its first bytes arrived: before the server parses its
headers, reads its body or works out its reply, which is the server's time, not the
client's), and ``last_byte`` just before the rest of the reply, its last event and the
end of the chunked body, leaves in one write. With ``hold`` the server streams as a model
does: the head and every event but the last go out at once, the last event and the
body's end when ``hold`` seconds have passed since the request arrived (its
``last_byte``), so a client reads the earlier events while it waits. With ``instant`` it
answers as soon as the body is read, from its last message alone, checking nothing and
keeping no cache (usage zero): what a benchmark sees of the client when no wait of the
server's cools its caches.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from wire_types import prepare, request_problem

__all__ = ["LOOKBACK", "CacheServer", "Served", "tokens"]

#: how many blocks before a mark Anthropic looks for a cached prefix
LOOKBACK = 20
#: OpenAI's smallest cached prefix and the steps cached prefixes grow in
OPENAI_MIN, OPENAI_STEP = 1024, 128
_CACHE_FIELDS = ("cache_control",)


def tokens(text: str) -> int:
    """The simulated token count of ``text``: one per four characters, at least one."""
    return max(1, len(text) // 4)


@dataclass
class Served:
    """One request as the server saw it: when it came, its usage, when its last byte left."""

    wire: str
    body: Any
    usage: dict[str, Any]
    received: float
    last_byte: float = 0.0


@dataclass
class _Block:
    key: str  # what identifies the block in a prefix (role and JSON, cache fields out)
    tokens: int
    mark: str | None  # the TTL of its cache_control mark, if any


def _without_cache_fields(block: Any) -> Any:
    if isinstance(block, dict):
        return {k: v for k, v in block.items() if k not in _CACHE_FIELDS}
    return block


def _anthropic_blocks(body: Mapping[str, Any]) -> list[_Block]:
    blocks: list[_Block] = []

    def add(kind: str, block: Any) -> None:
        text = json.dumps(_without_cache_fields(block), sort_keys=True)
        control = block.get("cache_control") if isinstance(block, dict) else None
        mark = str(control.get("ttl") or "5m") if isinstance(control, dict) else None
        blocks.append(_Block(f"{kind}:{text}", tokens(text), mark))

    for tool in body.get("tools") or ():
        add("tool", tool)
    system = body.get("system")
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system or ():
        add("system", block)
    for message in body.get("messages") or ():
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for block in content:
            add(message["role"], block)
    return blocks


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _HTTPServer
    arrived = 0.0  #: when the request line of the request being handled was read

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def parse_request(self) -> bool:
        # called as soon as the request line is read: the request's first bytes are here
        self.arrived = time.perf_counter()
        return super().parse_request()

    def do_POST(self) -> None:
        received = self.arrived
        owner = self.server.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        wire = "anthropic" if self.path.endswith("/messages") else "openai"
        if owner.instant:
            body = {"messages": [_last_message(raw)]}
            served = Served(wire, None, _NO_USAGE[wire], received)
            with owner._lock:
                owner.served.append(served)
        else:
            body = json.loads(raw)
            problem = request_problem(self.path, body)
            if problem is not None:  # the vendor's published request type refuses it
                with owner._lock:
                    owner.wire_problems.append(f"POST {self.path}: {problem}")
            served = owner._serve(wire, body, received)
        events = list(owner._events(wire, body, served.usage))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in events[:-1]:
            self._chunk(event)
        if owner.hold > 0:  # as a model streams: the last event comes when it is done
            owner._stopping.wait(max(0.0, received + owner.hold - time.perf_counter()))
        last = b"%x\r\n%s\r\n0\r\n\r\n" % (len(events[-1]), events[-1])  # and the body's end
        served.last_byte = time.perf_counter()
        self.wfile.write(last)
        self.wfile.flush()

    def do_GET(self) -> None:
        """``/served``: what was served, as JSON (for a client in another process);
        ``/clear``: forget the cache and what was served."""
        owner = self.server.owner
        if self.path == "/clear":
            owner.clear()
            data = b"{}"
        else:
            with owner._lock:
                data = json.dumps([vars(s) for s in owner.served]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


#: the usage an ``instant`` server reports
_NO_USAGE: dict[str, dict[str, Any]] = {
    "anthropic": {"input_tokens": 0, "output_tokens": 0},
    "openai": {"prompt_tokens": 0, "total_tokens": 0},
}


def _last_message(raw: bytes) -> Any:
    """The last message of a request body whose ``messages`` array ends it (as the
    clients' bodies do), parsed alone; else the whole body's."""
    start = raw.rfind(b'{"role": ')
    if start >= 0 and raw.endswith(b"]}"):
        try:
            return json.loads(raw[start:-2])
        except ValueError:
            pass
    return json.loads(raw)["messages"][-1]


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: CacheServer


Reply = Callable[[str, Mapping[str, Any]], "tuple[str, dict[str, Any] | None]"]


def _default_reply(tool_name: str) -> Reply:
    def reply(wire: str, body: Mapping[str, Any]) -> tuple[str, dict[str, Any] | None]:
        last = body["messages"][-1]
        after_tool = last["role"] == "tool" or (
            isinstance(last["content"], list)
            and any(b.get("type") == "tool_result" for b in last["content"])
        )
        if after_tool:
            return ("Here is what I found. " * 30).strip(), None
        return "", {"query": "the latest figures", "limit": 5}

    return reply


@dataclass
class CacheServer:
    """The server; use as a context manager. ``url`` is its base URL once started."""

    tool_name: str = "search"
    min_tokens: int = 1024  #: Anthropic's smallest cacheable prefix (Sonnet, Opus 4/4.1)
    reply: Reply | None = None
    #: seconds from a request's arrival to its answer's last event, at the least (0: the
    #: whole answer as soon as it is worked out); the events before it go out at once: a
    #: benchmark's client then waits as long at any transcript length, as it waits for a
    #: real model streaming its answer
    hold: float = 0.0
    #: answer as soon as the body is read, from its last message, checking nothing
    instant: bool = False
    served: list[Served] = field(default_factory=list)
    #: bodies their vendor's published request type refuses (tests/wire_types.py): leaving
    #: the server fails the test that sent them
    wire_problems: list[str] = field(default_factory=list)
    url: str = ""
    _anthropic: dict[str, float] = field(default_factory=dict)  # prefix hash -> expiry
    _openai: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _http: _HTTPServer | None = None
    _thread: threading.Thread | None = None
    _calls: int = 0

    def __enter__(self) -> CacheServer:
        prepare()  # the request checks' imports, before any client waits on them
        self._http = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._http.owner = self
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc_info: object) -> None:
        assert self._http is not None and self._thread is not None
        self._stopping.set()
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(10)
        if kind is None:
            assert not self.wire_problems, "\n".join(self.wire_problems)

    def clear(self) -> None:
        """Forget the cache and what was served."""
        with self._lock:
            self._anthropic.clear()
            self._openai.clear()
            self.served.clear()

    # --- the cache rules --------------------------------------------------------------

    def _serve(self, wire: str, body: Mapping[str, Any], received: float) -> Served:
        with self._lock:
            usage = self._anthropic_usage(body) if wire == "anthropic" else self._openai_usage(body)
            served = Served(wire, body, usage, received)
            self.served.append(served)
            return served

    def _anthropic_usage(self, body: Mapping[str, Any]) -> dict[str, Any]:
        now = time.monotonic()
        blocks = _anthropic_blocks(body)
        hashes, totals = [], []
        running, total = hashlib.sha256(str(body.get("model")).encode()), 0
        for block in blocks:
            running.update(block.key.encode())
            total += block.tokens
            hashes.append(running.hexdigest())
            totals.append(total)
        marks = [i for i, block in enumerate(blocks) if block.mark is not None]
        if len(marks) > 4:
            raise ValueError(f"{len(marks)} cache_control blocks; the API allows 4")
        cache = self._anthropic
        read_at = -1
        for mark in marks:
            for at in range(mark, max(mark - LOOKBACK, -1), -1):
                if cache.get(hashes[at], 0.0) > now:
                    if at > read_at:
                        read_at = at
                    break
        read = totals[read_at] if read_at >= 0 else 0
        if read_at >= 0:  # a hit refreshes the entry's lifetime
            cache[hashes[read_at]] = now + 300
        written_to = read_at
        split = {"5m": 0, "1h": 0}
        for mark in marks:
            if mark > read_at and totals[mark] >= self.min_tokens:
                ttl = blocks[mark].mark or "5m"
                cache[hashes[mark]] = now + (3600 if ttl == "1h" else 300)
                split[ttl] += totals[mark] - (totals[written_to] if written_to >= 0 else 0)
                written_to = mark
        write = split["5m"] + split["1h"]
        return {
            "input_tokens": total - read - write,
            "cache_creation_input_tokens": write,
            "cache_read_input_tokens": read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": split["5m"],
                "ephemeral_1h_input_tokens": split["1h"],
            },
        }

    def _openai_usage(self, body: Mapping[str, Any]) -> dict[str, Any]:
        now = time.monotonic()
        # the prompt as a text whose prefixes are the request's prefixes, cache fields out
        parts = [json.dumps(body.get("tools") or [], sort_keys=True)]
        parts += [json.dumps(m, sort_keys=True) for m in body.get("messages") or ()]
        text = str(body.get("model")) + "".join(parts)
        total = tokens(text)
        cache, cached = self._openai, 0
        lengths = range(OPENAI_MIN, total + 1, OPENAI_STEP)
        keys = {n: hashlib.sha256(text[: 4 * n].encode()).hexdigest() for n in lengths}
        for n in reversed(lengths):
            if cache.get(keys[n], 0.0) > now:
                cached = n
                break
        for key in keys.values():  # written after the call: every prefix, 5-10 minutes
            cache[key] = now + 300
        return {
            "prompt_tokens": total,
            "completion_tokens": 0,
            "prompt_tokens_details": {"cached_tokens": cached},
        }

    # --- the replies ------------------------------------------------------------------

    def _events(self, wire: str, body: Mapping[str, Any], usage: dict[str, Any]) -> Iterator[bytes]:
        self._calls += 1
        text, call = (self.reply or _default_reply(self.tool_name))(wire, body)
        out = tokens(text + json.dumps(call or {}))
        call_id = f"call_{self._calls:05d}"
        if wire == "anthropic":
            start: dict[str, Any] = {
                "type": "message_start",
                "message": {"model": body.get("model"), "usage": usage},
            }
            yield _sse("message_start", start)
            block: dict[str, Any]
            if call is None:
                block = {"type": "text", "text": text}
                stop = "end_turn"
            else:
                block = {"type": "tool_use", "id": call_id, "name": self.tool_name, "input": call}
                stop = "tool_use"
            yield _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                               "content_block": block})  # fmt: skip
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
            ending = {"type": "message_delta", "delta": {"stop_reason": stop},
                      "usage": {"output_tokens": out}}  # fmt: skip
            yield _sse("message_delta", ending)
            yield _sse("message_stop", {"type": "message_stop"})
            return
        if call is None:
            delta: dict[str, Any] = {"role": "assistant", "content": text}
            finish = "stop"
        else:
            function = {"name": self.tool_name, "arguments": json.dumps(call)}
            delta = {"role": "assistant", "tool_calls": [
                {"index": 0, "id": call_id, "type": "function", "function": function}]}  # fmt: skip
            finish = "tool_calls"
        yield _sse(None, {"model": body.get("model"), "choices": [
            {"index": 0, "delta": delta, "finish_reason": finish}]})  # fmt: skip
        usage = {**usage, "completion_tokens": out}
        yield _sse(None, {"model": body.get("model"), "choices": [], "usage": usage})
        yield b"data: [DONE]\n\n"


def main() -> None:
    """Serve until stdin closes, after printing the base URL (a server in a process of its
    own, so that timing a client is not timing the two sharing one interpreter lock); the
    first argument, if any, is ``hold`` in seconds, the second ``instant`` for an instant
    server."""
    import sys

    hold = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    instant = len(sys.argv) > 2 and sys.argv[2] == "instant"
    with CacheServer(hold=hold, instant=instant) as server:
        print(server.url, flush=True)
        sys.stdin.read()


def _sse(event: str | None, data: Any) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


if __name__ == "__main__":
    main()
