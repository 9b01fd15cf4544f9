"""Where a turn's own time goes, part by part: CPU and wall time between marks.

The same turns as ``token_cost.py``'s timing runs (a 1,500-token system prompt, one
tool call a turn, so two model calls; ``tests/cache_server.py`` in a process of its
own), with a mark as each part of the turn starts and ends (the turn on its worker
thread, taking the turn, each checkpoint save and owed write, each body encoded and
posted, each response built, the tool step, the commit) and as each request leaves
and each answer's bytes arrive. For the turns of the commonest sequence of marks it
prints, from each mark to the next, the median of our process's CPU time (every
thread's) and of the wall time. The spans from a request's last byte to its answer's
last byte are the model's; the others are ours. The marks add about 15% to a turn.

Run: ``python benchmarks/call_parts.py [--wire anthropic|openai] [--messages N]
[--hold S] [--instant] [--not-read-only] [--turns N] [--store memory|sqlite|postgres|redis]`` (PostgreSQL in a schema of
its own and Redis under a key prefix of its own, dropped at the end; the servers of
``LOUSHO_POSTGRES_URL`` and ``LOUSHO_REDIS_URL``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import token_cost

from lousho_sessions import Session, memory_store
from lousho_sessions.engine import _checkpoints, _session_core, _turn
from lousho_sessions.providers import _direct, _http_provider, anthropic, openai
from lousho_sessions.sqlite import SqliteStore
from lousho_sessions.stores import sqlite as sqlite_stores

#: a mark: what, the clock, our process's CPU time
Mark = tuple[str, float, float]
MARKS: list[Mark] = []


def mark(what: str) -> None:
    MARKS.append((what, time.perf_counter(), time.process_time()))


def marked(owner: Any, name: str, label: str) -> None:
    """Mark ``label>`` as ``owner.name`` is called and ``<label`` as it returns."""
    original: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        mark(label + ">")
        try:
            return original(*args, **kwargs)
        finally:
            mark("<" + label)

    setattr(owner, name, wrapper)


def mark_parts() -> None:
    marked(Session, "send", "SEND")
    marked(_session_core.SessionCore, "_turn", "turn")
    marked(sqlite_stores.SqliteSessionStore, "take_turn", "take")
    marked(sqlite_stores.SqliteSessionStore, "commit_turn", "commit")
    marked(_checkpoints.TurnCheckpoints, "save", "checkpoint")
    marked(_checkpoints.TurnCheckpoints, "flush", "owed")
    marked(_turn.Turn, "_call_model", "call")
    marked(_turn.Turn, "_tool_step", "tool")
    marked(anthropic.AnthropicProvider, "_view", "body")
    marked(openai.OpenAIProvider, "_view", "body")
    marked(_direct.DirectRoute, "post", "post")
    marked(_http_provider.HttpProvider, "_response", "response")

    class Marked(token_cost._Stamped):
        def sendall(self, data: Any, *args: Any) -> None:
            self._sock.sendall(data, *args)
            mark("sent")

        def sendmsg(self, buffers: Any, *args: Any) -> int:
            sent: int = self._sock.sendmsg(buffers, *args)
            mark("sent")
            return sent

        def recv(self, size: int, *args: Any) -> bytes:
            data: bytes = self._sock.recv(size, *args)
            mark("read")
            return data

    token_cost._Stamped = Marked  # type: ignore[misc]


@contextlib.contextmanager
def store_factory(kind: str) -> Iterator[Callable[[], Any]]:
    """Makes a store of ``kind`` for each run; what they keep is dropped at the end."""
    name = "call_parts_" + uuid.uuid4().hex[:12]
    with tempfile.TemporaryDirectory() as tmp:
        if kind == "sqlite":
            yield lambda: SqliteStore(Path(tmp) / "s.db")
        elif kind == "memory":
            yield memory_store
        elif kind == "postgres":
            import psycopg

            from lousho_sessions.postgres import PostgresStore

            url = os.environ.get("LOUSHO_POSTGRES_URL") or "postgresql://postgres@127.0.0.1/test"
            try:
                yield lambda: PostgresStore(url, schema=name, max_size=2)
            finally:
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        else:
            import redis

            from lousho_sessions.redis import RedisStore

            url = os.environ.get("LOUSHO_REDIS_URL") or "redis://127.0.0.1:6379/0"
            try:
                yield lambda: RedisStore(url, prefix=name)
            finally:
                client = redis.Redis.from_url(url)
                for key in client.scan_iter(match=f"{name}*", count=1000):
                    client.delete(key)
                client.close()


def turns_of(marks: list[Mark]) -> list[list[Mark]]:
    """The marks of each ``send()``, runs of sends and of reads each kept as their last."""
    turns: list[list[Mark]] = []
    for m in marks:
        if m[0] == "SEND>":
            turns.append([])
        if turns:
            turns[-1].append(m)
    out = []
    for turn in turns:
        kept = [m for at, m in enumerate(turn)
                if not (m[0] in ("sent", "read") and at + 1 < len(turn)
                        and turn[at + 1][0] == m[0])]  # fmt: skip
        out.append(kept)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--wire", choices=("anthropic", "openai"), default="anthropic")
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--hold", type=float, default=0.1)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument(
        "--instant",
        action="store_true",
        help="the instant server: reads the body, checks nothing, answers at once",
    )
    parser.add_argument(
        "--not-read-only",
        action="store_true",
        help="the tool not declared read-only (its step's response saved first)",
    )
    parser.add_argument(
        "--store", choices=("memory", "sqlite", "postgres", "redis"), default="sqlite"
    )
    args = parser.parse_args()
    mark_parts()
    with store_factory(args.store) as store:
        _, _, cpu = token_cost.overhead(
            args.wire,
            store,
            args.messages,
            args.turns,
            args.hold,
            args.instant,
            not args.not_read_only,
        )
    turns = turns_of(MARKS)[2:]  # not the warm-up's, nor the first timed one
    shapes = collections.Counter(tuple(m[0] for m in turn) for turn in turns)
    shape = shapes.most_common(1)[0][0]
    chosen = [turn for turn in turns if tuple(m[0] for m in turn) == shape]
    print(f"{args.wire}, {args.store}, {args.messages} messages, hold {args.hold} s: "
          f"{len(chosen)} of {len(turns)} turns in the commonest sequence; µs, median")  # fmt: skip
    print(f"  {'from':>12} -> {'to':12} {'CPU':>9} {'wall':>10}")
    for at in range(1, len(shape)):
        spent = [(turn[at][2] - turn[at - 1][2]) * 1e6 for turn in chosen]
        wall = [(turn[at][1] - turn[at - 1][1]) * 1e6 for turn in chosen]
        print(f"  {shape[at - 1]:>12} -> {shape[at]:12} {statistics.median(spent):9.1f}"
              f" {statistics.median(wall):10.1f}")  # fmt: skip
    print(
        f"our CPU time a model call (with the marks), median: {statistics.median(cpu) * 1e3:.3f} ms"
    )


if __name__ == "__main__":
    main()
