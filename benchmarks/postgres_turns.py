"""A durable PostgreSQL turn at transcript lengths 10, 1,000 and 5,000, beside the raw floor.

The turn: ``session.send`` with an instant ``FunctionProvider`` on a
``PostgresStore`` given whole to the agent (checkpoints on), so a turn takes
the lease, checks the revision, saves and deletes its checkpoints, appends two
messages and releases the lease. The floor: a plain psycopg connection doing
one transaction of two ``INSERT``s of message JSON on the same server — the
least a durable turn could write. Floor and turns alternate in blocks so that a
change in machine load hits both; the figures are medians, in µs.

Flat means t(5,000) / t(10) close to 1: an append writes only the new rows.

Needs the server of ``LOUSHO_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``); it works in a schema of its own,
dropped at the end. Run: ``python benchmarks/postgres_turns.py [--quick]``.

The peer comparison of the issue (LangGraph's ``PostgresSaver``, the OpenAI
Agents SDK's ``SQLAlchemySession``) is not measured here yet: it needs those
packages in a separate virtualenv (``python -m venv /tmp/peers && /tmp/peers/bin/pip
install langgraph langgraph-checkpoint-postgres 'openai-agents[sqlalchemy]'
asyncpg``), not as project dependencies.
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

import psycopg

from lousho_sessions import FunctionProvider, Message, ModelRequest, create_agent
from lousho_sessions.postgres import PostgresStore

URL = os.environ.get("LOUSHO_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/test"
LENGTHS = (10, 1_000, 5_000)
USER_JSON = json.dumps({"role": "user", "content": [{"type": "text", "text": "weather?"}]})
REPLY_JSON = json.dumps({"role": "assistant", "content": [{"type": "text", "text": "Sunny."}]})


def reply(request: ModelRequest) -> Message:
    return Message.assistant("Sunny.")


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


def timed(write: Callable[[], None], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        write()
        out.append((time.perf_counter() - start) * 1e6)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args()
    rounds, block = (60, 10) if args.quick else (300, 20)
    schema = "bench_" + secrets.token_hex(4)
    try:
        psycopg.connect(URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        sys.exit(f"PostgreSQL at {URL} is unreachable ({exc}); set LOUSHO_POSTGRES_URL")
    store = PostgresStore(URL, schema=schema, max_size=2)
    try:
        floor = Floor(schema)
        agent = create_agent(provider=FunctionProvider(reply), store=store)
        one, five, fifteen = os.getloadavg()
        print(f"PostgreSQL {URL.rsplit('@', 1)[-1]}, load {one:.2f}/{five:.2f}/{fifteen:.2f}")
        print(f"{'length':>7} {'turn µs':>9} {'floor µs':>9} {'turn/floor':>11}")
        results = {}
        for length in LENGTHS:
            sid = f"len-{length}"
            history = [
                Message.user(f"q{i}") if i % 2 == 0 else Message.assistant(f"a{i}")
                for i in range(length)
            ]
            store.sessions.save(sid, history)
            session = agent.session(sid)
            session.send("warm up")
            turns: list[float] = []
            floors: list[float] = []
            for _ in range(rounds // block):
                floors += timed(floor.write, block)
                turns += timed(lambda s=session: s.send("weather?"), block)  # type: ignore[misc]
            t, f = statistics.median(turns), statistics.median(floors)
            results[length] = t
            print(f"{length:>7} {t:>9.0f} {f:>9.0f} {t / f:>10.1f}x")
            session.close()
        print(f"flatness t(5,000)/t(10) = {results[5_000] / results[10]:.2f} (target <= 1.5)")
        print("peers (LangGraph PostgresSaver, OpenAI Agents SQLAlchemySession): not measured")
        agent.close()
        floor.conn.close()
    finally:
        store.close()
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
