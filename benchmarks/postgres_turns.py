"""A durable PostgreSQL turn at 10, 1,000 and 5,000 messages, beside the raw floor and two peers.

Our turn: ``session.send`` with an instant ``FunctionProvider`` on a
``PostgresStore`` given whole to the agent (checkpoints on), so a turn takes the
lease together with the turn's first checkpoint (which also reads the revision
and whether a checkpoint is pending), and appends the two new messages deleting
the checkpoint and freeing the lease (one statement): 2 round trips, each waiting
for a disk flush; both are calls of the schema's PL/pgSQL functions (schema v3,
``acquire_saving`` and ``append_turn``), whose plans the server caches.
"prepare=True" is the same on a store whose connections prepare their
statements (not behind PgBouncer in transaction mode < 1.21).

Figures, two round trips (schema v3), 2026-12-03, a quiet spell (load 0.6-1.5),
two runs: ours 1511 / 1829 µs at 1,000 messages, floor 571 / 703 µs (2.6x both;
2.5-2.7x at 10 and 5,000; prepare=True 2.2-2.5x), LangGraph 27.1x / 28.3x slower,
SQLAlchemySession 8.5x / 8.9x, flat 1.01 / 1.00 (this disk's flush was slower than
the day before: floor 571-703 µs against 366). Under load 5-14: 2.0-2.7x the floor,
LangGraph 11.8-35.6x.
Against main in one interleaved run (benchmarks/postgres_ab.py, synchronous_commit
off: the statements and the client only) 2.6-3.8 floors where main was 4.1-7.0;
see docs/performance.md.
Figures (three round trips, before schema v3). Quiet machine (load 1.0), 2026-12-02: ours 2238 /
2234 / 2275 µs at 10 / 1,000 / 5,000 messages, floor 366 µs at 1,000 (6.1x;
prepare=True 5.8x); LangGraph 11.1x slower at 1,000, SQLAlchemySession 2.9x.
Earlier (2 shared CPUs, other jobs running, load 5-8: ratios within one run; the
floor is one flush, so a slow disk flush, ~3 ms at times, compresses every
ratio towards 3, our three flushes). Before schema v2, quiet disk (floor ~400 µs):
ours 3100-3366 µs, 7.7-8.1x the floor, prepare=True 5.4-5.8x. With the schema-v2
functions: quiet disk, 2819 µs vs floor 522 µs (5.4x, prepare=True 5.4x: the
functions give prepare=True's saving without prepared statements), 2856 µs vs
384 µs (7.4x, an early run with only acquire and append as functions); busy
disk (floor 2.3-4.0 ms) 2.7-4.4x. So the <= 4x target is met only when flushes
are slow; on a quiet disk a turn is still 5-7 floors. The peers at 1,000
messages: LangGraph 3.5-9x slower than ours, SQLAlchemySession 1.3-2.3x. A whole
SQLAlchemySession turn costs fewer than 20 floors (6611 µs vs 403 µs: 16 floors;
a LangGraph turn 25435 µs: 63 floors), so 20x faster than SQLAlchemySession needs
a turn faster than one floor: not reachable by a turn that waits for even one
flush, let alone the three the lease/checkpoint/commit need.
The floor: a plain psycopg connection doing
one transaction of two ``INSERT``s of message JSON on the same server — the
least a durable turn could write.

The peers, in the same run on the same database (each in a schema of its own,
dropped at the end), run by the peers' interpreter as a subprocess
(``benchmarks/peers/pg_peers.py``; they are not project dependencies):

- LangGraph's ``PostgresSaver``: a ``StateGraph(MessagesState)`` whose one node is
  a fake model; a turn is one ``invoke`` on the conversation's ``thread_id``;
- the OpenAI Agents SDK's ``SQLAlchemySession`` (asyncpg): a turn is what its
  ``Runner`` does with the session, ``get_items()`` then ``add_items([user,
  assistant])``, without the model call or the agent loop.

Every side starts from a conversation of the same length (seeded through its own
API in one call) and adds two messages per turn. All sides at all lengths take
turns in blocks, so that a change in machine load hits all alike (the flatness
ratio included); the figures are medians, in µs.
Flat means t(5,000) / t(10) close to 1: an append writes only the new rows.

Set the peers up once with ``make peers`` (a ``.peers-venv`` with
``benchmarks/peers/requirements.txt``), or point ``LOUSHO_PEERS_PYTHON`` at a
python that has them; without one, only our side and the floor are measured.
Needs the server of ``LOUSHO_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``). Run:
``python benchmarks/postgres_turns.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from lousho_sessions import FunctionProvider, Message, ModelRequest, create_agent
from lousho_sessions.postgres import PostgresStore

sys.path.insert(0, str(Path(__file__).parent / "peers"))
from peer_protocol import REPLY_TEXT, PeerProcess, history_texts, load, start_peer

URL = os.environ.get("LOUSHO_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/test"
LENGTHS = (10, 1_000, 5_000)
PEERS = ("langgraph", "openai-sqlalchemy")
USER_JSON = json.dumps({"role": "user", "content": [{"type": "text", "text": "weather?"}]})
REPLY_JSON = json.dumps({"role": "assistant", "content": [{"type": "text", "text": REPLY_TEXT}]})


def reply(request: ModelRequest) -> Message:
    return Message.assistant(REPLY_TEXT)


def history(length: int) -> list[Message]:
    return [
        Message.user(text) if role == "user" else Message.assistant(text)
        for role, text in history_texts(length)
    ]


class Floor:
    """One transaction of two INSERTs on a connection of its own."""

    def __init__(self, schema: str) -> None:
        self.conn = psycopg.connect(URL, autocommit=True, prepare_threshold=None)
        self.table = f'"{schema}".floor'
        self.conn.execute(
            f"CREATE TABLE {self.table} (session_id text, seq integer, body json, "
            "PRIMARY KEY (session_id, seq))"
        )
        self.seq = 0

    def write(self) -> None:
        with self.conn.transaction():
            self.conn.execute(
                f"INSERT INTO {self.table} VALUES (%s, %s, %s)", ("bench", self.seq, USER_JSON)
            )
            self.conn.execute(
                f"INSERT INTO {self.table} VALUES (%s, %s, %s)",
                ("bench", self.seq + 1, REPLY_JSON),
            )
        self.seq += 2


def timed(write: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        write()
        out.append((time.perf_counter() - start) * 1e6)
    return out


def peer_turns(peer: PeerProcess, name: str, length: int, n: int) -> Callable[[], list[float]]:
    """A block of ``n`` turns of peer ``name`` on its conversation of ``length`` messages."""
    return lambda: list(peer.ask(op="turns", peer=name, length=length, n=n)["us"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--no-peers", action="store_true", help="measure our side only")
    args = parser.parse_args()
    blocks, block, peer_block = (6, 10, 3) if args.quick else (15, 20, 5)
    schema = "bench_" + secrets.token_hex(4)
    try:
        psycopg.connect(URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        sys.exit(f"PostgreSQL at {URL} is unreachable ({exc}); set LOUSHO_POSTGRES_URL")
    print(f"PostgreSQL {URL.rsplit('@', 1)[-1]}, {os.cpu_count()} CPUs, load {load()} at start")
    peer = None if args.no_peers else start_peer("pg_peers.py", URL)
    peers = PEERS if peer is not None else ()
    store = PostgresStore(URL, schema=schema, max_size=2)
    prepared = PostgresStore(URL, schema=schema, max_size=2, prepare=True)
    results: dict[str, dict[int, float]] = {
        side: {} for side in ("turn", "prepared", "floor", *peers)
    }
    try:
        floor = Floor(schema)
        agent = create_agent(provider=FunctionProvider(reply), store=store)
        agent_p = create_agent(provider=FunctionProvider(reply), store=prepared)
        # every side at every length, set up first, then measured in interleaved blocks
        sides: list[tuple[str, int, Callable[[], list[float]]]] = []
        sessions = []
        for length in LENGTHS:
            sid = f"len-{length}"
            store.sessions.save(sid, history(length))
            session = agent.session(sid)
            session.send("warm up")
            sessions.append(session)
            sides.append(("floor", length, lambda: timed(floor.write, block)))
            sides.append(
                ("turn", length, lambda s=session: timed(lambda: s.send("weather?"), block))  # type: ignore[misc]
            )
            store.sessions.save(f"prep-{length}", history(length))
            session_p = agent_p.session(f"prep-{length}")
            session_p.send("warm up")
            sessions.append(session_p)
            sides.append(
                ("prepared", length, lambda s=session_p: timed(lambda: s.send("weather?"), block))  # type: ignore[misc]
            )
            for name in peers:
                assert peer is not None
                peer.ask(op="seed", peer=name, length=length)
                peer.ask(op="turns", peer=name, length=length, n=2)  # warm up
                sides.append((name, length, peer_turns(peer, name, length, peer_block)))
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
        agent_p.close()
        floor.conn.close()
    finally:
        store.close()
        prepared.close()
        if peer is not None:
            peer.close()
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    report(results, peers, blocks, block, peer_block)


def report(
    results: dict[str, dict[int, float]],
    peers: tuple[str, ...],
    blocks: int,
    block: int,
    peer_block: int,
) -> None:
    turn, floor, prep = results["turn"], results["floor"], results["prepared"]
    print(
        f"median µs per turn (2 new messages), {blocks} blocks of {block} turns (peers: "
        f"{peer_block}) per side and length, interleaved; load {load()} at the end"
    )
    head = f"{'length':>7} {'ours':>8} {'floor':>7} {'ours/floor':>10} {'prepare=True':>12} {'/floor':>7}"
    for name in peers:
        head += f" {name:>18} {'speed-up':>9}"
    print(head)
    for n in LENGTHS:
        line = f"{n:>7,} {turn[n]:>8.0f} {floor[n]:>7.0f} {turn[n] / floor[n]:>9.1f}x"
        line += f" {prep[n]:>12.0f} {prep[n] / floor[n]:>6.1f}x"
        for name in peers:
            line += f" {results[name][n]:>18.0f} {results[name][n] / turn[n]:>8.1f}x"
        print(line)
    flat = turn[5_000] / turn[10]
    checks = [
        (f"flat t(5,000)/t(10) = {flat:.2f}", flat <= 1.5, "<= 1.5"),
        (
            f"ours/floor at 1,000 = {turn[1_000] / floor[1_000]:.1f}x",
            turn[1_000] <= 4 * floor[1_000],
            "<= 4x",
        ),
    ]
    for name in peers:
        for_peer = results[name]
        speed = for_peer[1_000] / turn[1_000]
        checks.append((f"speed-up vs {name} at 1,000 = {speed:.1f}x", speed >= 20, ">= 20x"))
        print(f"{name} t(5,000)/t(10) = {for_peer[5_000] / for_peer[10]:.2f}")
    for text, met, target in checks:
        print(f"target {text} ({target}): {'met' if met else 'MISSED'}")
    if not peers:
        print("peers: not measured (see above)")


if __name__ == "__main__":
    main()
