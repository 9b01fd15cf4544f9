"""SSE decoding speed, and latency from the socket to a ``ModelTextDelta``.

1. Throughput: MB/s of ``SSEDecoder`` on a 10 MB generated stream of realistic
   Chat Completions chunks, fed in pieces of several sizes; and the same with
   each event's JSON parsed (what ``OpenAIProvider`` does per event).
2. One long line: seconds to decode a single 10, 20 and 40 MB ``data`` line
   fed in 64 KiB pieces (a hostile or runaway stream); the time must grow
   linearly (it was 1.2 s, 4.4 s and 18 s before the decoder kept pieces).
3. Latency: the local test server streams paced events whose text is
   ``time.perf_counter()`` taken just before the server writes them; the
   client (``OpenAIProvider`` over a real socket) subtracts it from the clock
   when the delta comes out of ``stream()``. Target: p99 under 1 ms.

Run: ``make bench`` or ``python benchmarks/sse_decode.py``.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from provider_server import ProviderServer, SSEReply

from lousho_sessions.messages import Message
from lousho_sessions.providers._sse import SSEDecoder
from lousho_sessions.providers.base import ModelRequest, ModelTextDelta
from lousho_sessions.providers.openai import OpenAIProvider

SIZE = 10 * 1024 * 1024
PIECES = (256, 4096, 65536)
DELTAS = 2000
WORDS = [
    "the",
    "a",
    "model",
    "stream",
    "token",
    "reply",
    "☀️",
    "café",
    "naïve",
    "東京",
    "data",
    "event",
    "chunk",
    "latency",
    "é",
]


def chunk_event(rng: random.Random) -> bytes:
    """One Chat Completions chunk as OpenAI sends it (LF line ends)."""
    text = " " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
    chunk = {
        "id": "chatcmpl-AqKxW3p9XbQ1",
        "object": "chat.completion.chunk",
        "created": 1737000000,
        "model": "gpt-4o-mini-2024-07-18",
        "system_fingerprint": "fp_0aa8d3e20b",
        "choices": [
            {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}
        ],
        "usage": None,
    }
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"


def generated_stream() -> tuple[bytes, int]:
    rng = random.Random(7)
    parts: list[bytes] = []
    total = 0
    while total < SIZE:
        event = chunk_event(rng)
        parts.append(event)
        total += len(event)
    return b"".join(parts), len(parts)


def throughput(data: bytes, piece: int, parse: bool) -> float:
    """Best MB/s of three runs."""
    best = float("inf")
    for _ in range(3):
        decoder = SSEDecoder()
        count = 0
        start = time.perf_counter()
        for offset in range(0, len(data), piece):
            for event in decoder.feed(data[offset : offset + piece]):
                if parse:
                    json.loads(event.data)
                count += 1
        best = min(best, time.perf_counter() - start)
    return len(data) / best / 1e6


def long_line(megabytes: int) -> float:
    """Seconds to decode one ``data`` line of ``megabytes`` MB fed in 64 KiB pieces."""
    data = b"data: " + b"x" * (megabytes * 1_000_000) + b"\n\n"
    decoder = SSEDecoder(max_event_size=None)
    start = time.perf_counter()
    events = [e for i in range(0, len(data), 65536) for e in decoder.feed(data[i : i + 65536])]
    elapsed = time.perf_counter() - start
    assert len(events) == 1
    return elapsed


def latency() -> list[float]:
    """Seconds from the server's write to the delta leaving ``stream()``, per delta."""
    stamped = (
        b'data: {"choices":[{"index":0,"delta":{"content":"{stamp}"},"finish_reason":null}]}\n\n'
    )
    events = [stamped] * DELTAS + [
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    samples: list[float] = []
    with ProviderServer() as server:
        # pace the events so each is read on its own, as a real model's tokens are
        server.reply(SSEReply(events, delay=0.0005))
        with OpenAIProvider("bench", api_key="", base_url=server.url + "/v1") as provider:
            request = ModelRequest(system=None, messages=(Message.user("go"),))
            for event in provider.stream(request, request.signal):
                if isinstance(event, ModelTextDelta):
                    samples.append(time.perf_counter() - float(event.text))
    return samples


def main() -> None:
    data, events = generated_stream()
    print(f"stream: {len(data) / 1e6:.1f} MB, {events} chat.completion.chunk events")
    print(f"{'piece bytes':>12} | {'decode MB/s':>11} | {'decode+json MB/s':>16}")
    for piece in PIECES:
        plain = throughput(data, piece, parse=False)
        parsed = throughput(data, piece, parse=True)
        print(f"{piece:>12} | {plain:>11.1f} | {parsed:>16.1f}")
    print(f"{'one line MB':>12} | {'seconds':>8} | {'s per MB':>9}")
    for megabytes in (10, 20, 40):
        seconds = long_line(megabytes)
        print(f"{megabytes:>12} | {seconds:>8.3f} | {seconds / megabytes:>9.4f}")
    samples = sorted(latency())
    ms = [s * 1000 for s in samples]
    p50 = statistics.median(ms)
    p99 = ms[int(len(ms) * 0.99) - 1]
    print(f"socket -> ModelTextDelta over {len(ms)} deltas (local server, OpenAIProvider):")
    print(f"{'p50 ms':>8} | {'p99 ms':>8} | {'max ms':>8} | target p99 < 1 ms")
    verdict = "met" if p99 < 1.0 else "MISSED"
    print(f"{p50:>8.3f} | {p99:>8.3f} | {ms[-1]:>8.3f} | {verdict}")


if __name__ == "__main__":
    main()
