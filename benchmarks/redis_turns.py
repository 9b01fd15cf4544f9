"""Median µs per durable ``session.send`` on RedisStore at 10, 1,000 and 5,000 messages.

Each turn takes the session's lease (one script), checks the revision, runs the
(instant) model, writes and deletes the turn's durable checkpoint (a script
each), appends the two new messages (one script) and releases the lease. The
cost must stay flat — t(5,000) / t(10) <= 1.5 — because an append pushes only the
new messages. Also prints the raw ``append`` µs.

Needs a Redis server: ``LOUSHO_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``);
without one it says so and exits 0. Keys go under a prefix of their own, deleted
afterwards. Run: ``python benchmarks/redis_turns.py`` (or ``make bench``).

Not measured here (yet): the OpenAI Agents SDK's ``RedisSession`` (``get_items`` +
``add_items``) on the same server. It needs ``openai-agents[redis]`` in a venv of
its own (its pins must not meet ours): ``python -m venv /tmp/oa && /tmp/oa/bin/pip
install 'openai-agents[redis]'``, then time ``get_items()`` + ``add_items(two)``
per turn at the same lengths with that interpreter.
"""

from __future__ import annotations

import os
import secrets
import statistics
import sys
import time

import redis

from lousho_sessions import FunctionProvider, Message, Usage, create_agent
from lousho_sessions.providers.base import ModelRequest
from lousho_sessions.redis import RedisStore

LENGTHS = (10, 1_000, 5_000)
ROUNDS = 100
WARMUP = 10
URL = os.environ.get("LOUSHO_REDIS_URL") or "redis://127.0.0.1:6379/0"


def instant(request: ModelRequest) -> Message:
    return Message.assistant(
        "Revenue grew in most regions while costs stayed flat. " * 5, usage=Usage(1_200, 180)
    )


def history(length: int) -> list[Message]:
    return [
        m
        for n in range(length // 2)
        for m in (
            Message.user(f"Question {n}: what changed in the report for region {n % 7}?"),
            Message.assistant("Revenue grew in most regions while costs stayed flat. " * 5),
        )
    ]


def measure_send(store: RedisStore, length: int) -> float:
    """Median µs per durable send on a session that already holds ``length`` messages."""
    id = f"bench-{length}"
    store.sessions.save(id, history(length))
    agent = create_agent(provider=FunctionProvider(instant), store=store)
    session = agent.session(id)
    for _ in range(WARMUP):
        session.send("warm up")
    samples = []
    for n in range(ROUNDS):
        start = time.perf_counter_ns()
        session.send(f"What about region {n}?")
        samples.append((time.perf_counter_ns() - start) / 1_000)
    session.close()
    agent.close()
    return statistics.median(samples)


def measure_append(store: RedisStore, length: int) -> float:
    """Median µs per raw ``append`` of two messages at ``length`` stored messages."""
    id = f"raw-{length}"
    store.sessions.save(id, history(length))
    known = length
    samples = []
    for n in range(ROUNDS):
        new = [Message.user(f"q{n}"), Message.assistant(f"a{n}")]
        start = time.perf_counter_ns()
        store.sessions.append(id, new, known)
        samples.append((time.perf_counter_ns() - start) / 1_000)
        known += 2
    return statistics.median(samples)


def main() -> None:
    try:
        redis.Redis.from_url(URL, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        print(f"skipped: Redis at {URL} is unreachable ({exc})")
        return
    prefix = f"lousho-bench-{secrets.token_hex(4)}"
    store = RedisStore(URL, prefix=prefix)
    try:
        sends = {n: measure_send(store, n) for n in LENGTHS}
        appends = {n: measure_append(store, n) for n in LENGTHS}
    finally:
        store.close()
        with redis.Redis.from_url(URL) as client:
            keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            if keys:
                client.unlink(*keys)
    print(f"RedisStore at {URL}: median µs (instant model, 2 new messages per turn)")
    print(f"{'':>22} | " + " | ".join(f"{n:>8,}" for n in LENGTHS) + " | t(5000)/t(10)")
    for name, row in (("durable session.send", sends), ("raw append", appends)):
        cells = " | ".join(f"{row[n]:>8.0f}" for n in LENGTHS)
        print(f"{name:>22} | {cells} | {row[5_000] / row[10]:>13.2f}")
    flat = sends[5_000] / sends[10] <= 1.5
    print(f"target (durable send ratio <= 1.5): {'met' if flat else 'MISSED'}")
    if not flat:
        sys.exit(1)


if __name__ == "__main__":
    main()
