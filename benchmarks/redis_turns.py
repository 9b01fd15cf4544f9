"""A durable RedisStore turn at 10, 1,000 and 5,000 messages, beside the Agents SDK's RedisSession.

Our turn: ``session.send`` with an instant ``FunctionProvider`` on a
``RedisStore`` given whole to the agent (checkpoints on), two round trips: it
takes the session's lease and saves the turn's input checkpoint with it (one
script, ``ACQUIRE_SAVING``, which also returns the revision and whether the
session had any checkpoint, so no pending turn is read), and appends the two new
messages deleting the checkpoint and releasing the lease (one script,
``commit_turn(CommitTurn(release=))``).
The line above the table says whether redis-py parses with ``hiredis`` (the
``redis`` extra installs it). It must stay flat —
t(5,000) / t(10) <= 1.5 — because an append pushes only the new messages. Also
timed: the raw ``append`` of two messages.

The peer, in the same run on the same server under a key prefix of its own
(deleted at the end), run by the peers' interpreter as a subprocess
(``benchmarks/peers/redis_peers.py``; not a project dependency): the OpenAI
Agents SDK's ``RedisSession``, a turn being what its ``Runner`` does with the
session, ``get_items()`` then ``add_items([user, assistant])``, without the model
call or the agent loop. Both start from a conversation of the same length
(seeded through each one's API in one call). All sides at all lengths take
turns in blocks, so that a change in machine load hits all alike (the flatness
ratio included); the figures are medians, in µs.

Set the peer up once with ``make peers`` (a ``.peers-venv`` with
``benchmarks/peers/requirements.txt``), or point ``LOUSHO_PEERS_PYTHON`` at a
python that has it; without one, only our side is measured. Needs a Redis
server: ``LOUSHO_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``); without one
it says so and exits 0. Run: ``python benchmarks/redis_turns.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import redis

from lousho_sessions import FunctionProvider, Message, Usage, create_agent
from lousho_sessions.providers.base import ModelRequest
from lousho_sessions.redis import RedisStore

sys.path.insert(0, str(Path(__file__).parent / "peers"))
from peer_protocol import REPLY_TEXT, PeerProcess, history_texts, load, start_peer

LENGTHS = (10, 1_000, 5_000)
PEER = "openai-redis"
URL = os.environ.get("LOUSHO_REDIS_URL") or "redis://127.0.0.1:6379/0"


def instant(request: ModelRequest) -> Message:
    return Message.assistant(REPLY_TEXT, usage=Usage(1_200, 180))


def history(length: int) -> list[Message]:
    return [
        Message.user(text) if role == "user" else Message.assistant(text)
        for role, text in history_texts(length)
    ]


def timed(call: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter_ns()
        call()
        out.append((time.perf_counter_ns() - start) / 1_000)
    return out


class Appender:
    """The raw ``append`` of two messages to a session of ``length`` messages."""

    def __init__(self, store: RedisStore, length: int) -> None:
        self.store, self.id, self.known = store, f"raw-{length}", length
        store.sessions.save(self.id, history(length))

    def append(self) -> None:
        new = [Message.user(f"q{self.known}"), Message.assistant(f"a{self.known}")]
        self.store.sessions.append(self.id, new, self.known)
        self.known += 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--no-peers", action="store_true", help="measure our side only")
    args = parser.parse_args()
    blocks, block, peer_block = (6, 10, 5) if args.quick else (15, 20, 10)
    try:
        redis.Redis.from_url(URL, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        print(f"skipped: Redis at {URL} is unreachable ({exc})")
        return
    print(f"Redis {URL}, {os.cpu_count()} CPUs, load {load()} at start")
    print(f"redis-py {redis.__version__}, hiredis parser: {redis.utils.HIREDIS_AVAILABLE}")
    peer = None if args.no_peers else start_peer("redis_peers.py", URL)
    prefix = f"lousho-bench-{secrets.token_hex(4)}"
    store = RedisStore(URL, prefix=prefix)
    results: dict[str, dict[int, float]] = {"send": {}, "append": {}, PEER: {}}
    try:
        agent = create_agent(provider=FunctionProvider(instant), store=store)
        # every side at every length, set up first, then measured in interleaved blocks
        sides: list[tuple[str, int, Callable[[], list[float]]]] = []
        sessions = []
        for length in LENGTHS:
            id = f"bench-{length}"
            store.sessions.save(id, history(length))
            session = agent.session(id)
            timed(lambda s=session: s.send("warm up"), 5)  # type: ignore[misc]
            sessions.append(session)
            appender = Appender(store, length)
            sides.append(
                ("send", length, lambda s=session: timed(lambda: s.send("What about it?"), block))  # type: ignore[misc]
            )
            sides.append(("append", length, lambda a=appender: timed(a.append, block)))  # type: ignore[misc]
            if peer is not None:
                peer.ask(op="seed", peer=PEER, length=length)
                peer.ask(op="turns", peer=PEER, length=length, n=3)  # warm up
                sides.append((PEER, length, peer_turns(peer, length, peer_block)))
        samples: dict[tuple[str, int], list[float]] = {(n, k): [] for n, k, _ in sides}
        for b in range(blocks):
            shift = b * len(sides) // blocks
            for name, length, run in sides[shift:] + sides[:shift]:
                samples[name, length] += run()
        for (name, length), values in samples.items():
            results[name][length] = statistics.median(values)
        for session in sessions:
            session.close()
        agent.close()
    finally:
        store.close()
        if peer is not None:
            peer.close()
        with redis.Redis.from_url(URL) as client:
            keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            if keys:
                client.unlink(*keys)
    report(results, peer is not None, blocks, block, peer_block)


def peer_turns(peer: PeerProcess, length: int, n: int) -> Callable[[], list[float]]:
    """A block of ``n`` peer turns on its conversation of ``length`` messages."""
    return lambda: list(peer.ask(op="turns", peer=PEER, length=length, n=n)["us"])


def report(
    results: dict[str, dict[int, float]], peered: bool, blocks: int, block: int, peer_block: int
) -> None:
    print(
        f"median µs per turn (2 new messages), {blocks} blocks of {block} turns (peer: "
        f"{peer_block}) per side and length, interleaved; load {load()} at the end"
    )
    rows = [("durable session.send", results["send"]), ("raw append", results["append"])]
    if peered:
        rows.append((f"{PEER} get+add", results[PEER]))
    print(f"{'':>22} | " + " | ".join(f"{n:>8,}" for n in LENGTHS) + " | t(5000)/t(10)")
    for name, row in rows:
        cells = " | ".join(f"{row[n]:>8.0f}" for n in LENGTHS)
        print(f"{name:>22} | {cells} | {row[5_000] / row[10]:>13.2f}")
    sends = results["send"]
    if peered:
        peer = results[PEER]
        speed = " | ".join(f"{peer[n] / sends[n]:>7.1f}x" for n in LENGTHS)
        print(f"{'speed-up vs ' + PEER:>22} | {speed} |")
    flat = sends[5_000] / sends[10] <= 1.5
    print(f"target durable send t(5,000)/t(10) <= 1.5: {'met' if flat else 'MISSED'}")
    if peered:
        fast = results[PEER][1_000] / sends[1_000] >= 10
        print(f"target >= 10x faster than {PEER} at 1,000: {'met' if fast else 'MISSED'}")
    else:
        print("peer: not measured (see above)")
    if not flat:
        sys.exit(1)


if __name__ == "__main__":
    main()
