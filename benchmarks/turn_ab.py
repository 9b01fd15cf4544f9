"""Two versions of the package, one durable turn each, timed in one run, interleaved.

On a shared machine the load changes from minute to minute, so figures taken in
different runs cannot be compared; this runs a baseline (by default the package
as of git ``main``, taken out with ``git archive`` into a temporary directory)
and this checkout side by side, each in a child process of its own, with the
store's floor, in blocks that take turns. Each side: ``session.send`` with an
instant ``FunctionProvider`` (``--tool``: one call of an instant tool, so two
model calls and four new messages) on a store given whole to the agent
(checkpoints on), starting from a conversation of ``--length`` messages:

- ``sqlite``: ``SqliteStore`` (``synchronous=NORMAL``) in a temporary directory;
  floor: a raw ``sqlite3`` WAL transaction of two ``INSERT``s;
- ``postgres``: ``PostgresStore`` in a schema of its own, dropped at the end
  (``LOUSHO_POSTGRES_URL``); floor: one transaction of two ``INSERT``s.
  ``--no-flush`` runs every side with ``synchronous_commit=off`` for its own
  connections (no other session is touched): what is left is the statements' and
  the client's cost, which is what a quiet disk shows;
- ``redis``: ``RedisStore`` under a key prefix of its own, deleted at the end
  (``LOUSHO_REDIS_URL``); floor: one ``RPUSH`` of two messages;
- ``memory``: ``memory_store()``, the engine with no database; no floor.

``--instructions N`` counts instead of timing: each version's side runs under
``valgrind --tool=callgrind`` twice, doing its warm-up and then 0 and N turns,
and the difference of the instructions its process executed, divided by N, is
the client's instructions per turn: the same whatever the machine's load (the
servers' work is not counted).

Run: ``python benchmarks/turn_ab.py --store sqlite|postgres|redis|memory
[--baseline-ref main] [--tool] [--length 1000] [--no-flush] [--instructions N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
STORES = ("sqlite", "postgres", "redis", "memory")
POSTGRES_URL = os.environ.get("LOUSHO_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/test"
REDIS_URL = os.environ.get("LOUSHO_REDIS_URL") or "redis://127.0.0.1:6379/0"
NO_FLUSH = "options=-c%20synchronous_commit%3Doff"
BODY = json.dumps({"role": "user", "content": [{"type": "text", "text": "weather?"}]})
WARMUP = 10

Turn = Callable[[], object]


def where(store: str, no_flush: bool) -> str:
    """The server URL a side of ``store`` connects to ("" for the embedded stores)."""
    if store == "postgres":
        return POSTGRES_URL + (("&" if "?" in POSTGRES_URL else "?") + NO_FLUSH if no_flush else "")
    return REDIS_URL if store == "redis" else ""


@contextmanager
def floor(store: str, url: str) -> Iterator[Turn]:
    """The least a durable turn could write on ``store``, as a callable."""
    if store == "sqlite":
        with tempfile.TemporaryDirectory(prefix="lousho-ab-") as tmp:
            conn = sqlite3.connect(Path(tmp) / "floor.db", isolation_level=None)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("CREATE TABLE floor (session_id TEXT, seq INTEGER, body TEXT, PRIMARY KEY (session_id, seq))")  # fmt: skip
            seq = 0

            def sqlite_turn() -> None:
                nonlocal seq
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO floor VALUES (?, ?, ?)", ("b", seq, BODY))
                conn.execute("INSERT INTO floor VALUES (?, ?, ?)", ("b", seq + 1, BODY))
                conn.execute("COMMIT")
                seq += 2

            try:
                yield sqlite_turn
            finally:
                conn.close()
    elif store == "postgres":
        import psycopg

        schema = "ab_" + secrets.token_hex(4)
        pg = psycopg.connect(url, autocommit=True, prepare_threshold=None)
        pg.execute(f'CREATE SCHEMA "{schema}"')
        table = f'"{schema}".floor'
        pg.execute(f"CREATE TABLE {table} (session_id text, seq integer, body json, PRIMARY KEY (session_id, seq))")  # fmt: skip
        number = 0

        def postgres_turn() -> None:
            nonlocal number
            with pg.transaction():
                pg.execute(f"INSERT INTO {table} VALUES (%s, %s, %s)", ("b", number, BODY))
                pg.execute(f"INSERT INTO {table} VALUES (%s, %s, %s)", ("b", number + 1, BODY))
            number += 2

        try:
            yield postgres_turn
        finally:
            pg.execute(f'DROP SCHEMA "{schema}" CASCADE')
            pg.close()
    elif store == "redis":
        import redis

        client = redis.Redis.from_url(url)
        key = "lousho-ab-" + secrets.token_hex(4)
        try:
            yield lambda: client.rpush(key, BODY, BODY)
        finally:
            client.delete(key)
            client.close()
    else:
        raise ValueError(f"{store!r} has no floor")


@contextmanager
def package_store(store: str, url: str) -> Iterator[Any]:
    """The store a side's agent is given, made by the package imported (either version)."""
    name = "ab_" + secrets.token_hex(4)
    if store == "memory":
        from lousho_sessions import memory_store

        yield memory_store()
    elif store == "sqlite":
        from lousho_sessions.sqlite import SqliteStore

        with tempfile.TemporaryDirectory(prefix="lousho-ab-") as tmp:
            sqlite_store = SqliteStore(Path(tmp) / "turns.db")
            try:
                yield sqlite_store
            finally:
                sqlite_store.close()
    elif store == "postgres":
        import psycopg

        from lousho_sessions.postgres import PostgresStore

        postgres_store = PostgresStore(url, schema=name, max_size=2)
        try:
            yield postgres_store
        finally:
            postgres_store.close()
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{name}" CASCADE')
    else:
        import redis

        from lousho_sessions.redis import RedisStore

        redis_store = RedisStore(url, prefix=name)
        try:
            yield redis_store
        finally:
            redis_store.close()
            client = redis.Redis.from_url(url)
            keys = list(client.scan_iter(match=f"{name}*", count=1_000))
            if keys:
                client.delete(*keys)
            client.close()


@contextmanager
def package_turn(source: str, store: str, url: str, length: int, with_tool: bool) -> Iterator[Turn]:
    """A durable turn of the package in directory ``source``, warmed up, as a callable."""
    sys.path.insert(0, source)
    import lousho_sessions
    from lousho_sessions import FunctionProvider, Message, ToolCall, create_agent, tool

    assert lousho_sessions.__file__.startswith(source), lousho_sessions.__file__

    @tool
    def lookup(city: str) -> str:
        """Instant tool."""
        return "sunny"

    def model(request: Any) -> Any:
        if not with_tool or request.messages[-1].role == "tool":
            return Message.assistant("It is sunny.")
        return Message.assistant("", tool_calls=[ToolCall("c1", "lookup", {"city": "Paris"})])

    with package_store(store, url) as made:
        agent = create_agent(
            provider=FunctionProvider(model), tools=[lookup] if with_tool else [], store=made
        )
        history = [Message.user(f"q{n}") if n % 2 == 0 else Message.assistant(f"a{n}") for n in range(length)]  # fmt: skip
        made.sessions.save("s", history)
        session = agent.session("s")
        try:
            for _ in range(WARMUP):
                session.send("warm up")
            yield lambda: session.send("weather?")
        finally:
            session.close()
            agent.close()


def side(source: str, store: str, url: str, length: int, with_tool: bool, count: int) -> None:
    """A child: ``source`` ("floor", or the directory of a version of the package) answers
    the parent's requests for timed blocks, or (``count`` >= 0) runs ``count`` turns and exits."""
    made = (
        floor(store, url)
        if source == "floor"
        else package_turn(source, store, url, length, with_tool)
    )
    with made as turn:
        if count >= 0:
            for _ in range(count):
                turn()
        else:
            serve(turn)


def serve(turn: Turn) -> None:
    """Answer each line ``n`` on stdin with the µs of ``n`` turns, as a JSON list."""
    print("ready", flush=True)
    for line in sys.stdin:
        out = []
        for _ in range(int(line)):
            start = time.perf_counter()
            turn()
            out.append((time.perf_counter() - start) * 1e6)
        print(json.dumps(out), flush=True)


def ask(child: subprocess.Popen[str], n: int) -> list[float]:
    stdin, stdout = child.stdin, child.stdout
    assert stdin is not None and stdout is not None
    stdin.write(f"{n}\n")
    stdin.flush()
    return list(json.loads(stdout.readline()))


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def side_command(args: argparse.Namespace, source: str, url: str, count: int = -1) -> list[str]:
    return [
        sys.executable,
        __file__,
        "--store",
        args.store,
        "--length",
        str(args.length),
        *(["--tool"] if args.tool else []),
        "--side",
        source,
        url,
        str(count),
    ]


def timed(args: argparse.Namespace, sources: dict[str, str], url: str) -> dict[str, list[float]]:
    """µs per turn of every side, taken in interleaved blocks."""
    children = {
        name: subprocess.Popen(
            side_command(args, src, url), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for name, src in sources.items()
    }
    try:
        for child in children.values():
            out: IO[str] | None = child.stdout
            assert out is not None and out.readline().strip() == "ready"
        print(f"load {load()} at start", flush=True)
        samples: dict[str, list[float]] = {name: [] for name in children}
        names = list(children)
        for b in range(args.blocks):
            for name in names[b % len(names) :] + names[: b % len(names)]:
                samples[name] += ask(children[name], args.block)
    finally:
        for child in children.values():
            if child.stdin is not None:
                child.stdin.close()
            child.wait()
    return samples


_COLLECTED = re.compile(r"Collected : (\d+)")


def executed(command: list[str], env: dict[str, str], stdin: str | None = None) -> int:
    """Instructions ``command``'s process executes under callgrind (``PYTHONHASHSEED=0``
    added to ``env``; ``stdin`` its input); exits naming the failure if it fails."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        sys.exit("--instructions needs valgrind (apt-get install valgrind)")
    done = subprocess.run(
        [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
        input=stdin,
        capture_output=True,
        text=True,
        env=env | {"PYTHONHASHSEED": "0"},
        check=False,
    )
    found = _COLLECTED.findall(done.stderr)
    if done.returncode != 0 or not found:
        sys.exit(f"the process under callgrind failed ({done.returncode}): {done.stderr[-2000:]}")
    return int(found[-1])


def instructions(args: argparse.Namespace, source: str, url: str, turns: int) -> int:
    """Instructions the side's process executes under callgrind for ``turns`` turns."""
    return executed(side_command(args, source, url, turns), dict(os.environ))


def counted(args: argparse.Namespace, sources: dict[str, str], url: str) -> None:
    """Client instructions per turn of each version: (I(N turns) - I(0 turns)) / N."""
    n = args.instructions
    print(f"load {load()} at start (instructions do not depend on it)", flush=True)
    per_turn: dict[str, float] = {}
    for name, src in sources.items():
        base = instructions(args, src, url, 0)
        per_turn[name] = (instructions(args, src, url, n) - base) / n
    print(f"client instructions per turn ({args.store}, {n} turns under callgrind, after {WARMUP} warm-up turns)")  # fmt: skip
    first = next(iter(per_turn.values()))
    for name, count in per_turn.items():
        print(f"{name:>16} {count:12,.0f} {count / first:6.3f}x")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--store", choices=STORES, default="sqlite")
    parser.add_argument("--baseline-ref", default="main", help="git ref of the baseline")
    parser.add_argument("--tool", action="store_true", help="one tool call per turn")
    parser.add_argument("--length", type=int, default=1_000, help="messages in the conversation")
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--block", type=int, default=20, help="turns per side and block")
    parser.add_argument("--no-flush", action="store_true", help="postgres: synchronous_commit=off")
    parser.add_argument("--instructions", type=int, metavar="N", help="count, don't time")
    parser.add_argument("--side", nargs=3, help=argparse.SUPPRESS)  # a child: SOURCE URL COUNT
    args = parser.parse_args(argv)
    if args.side:
        side(args.side[0], args.store, args.side[1], args.length, args.tool, int(args.side[2]))
        return
    url = where(args.store, args.no_flush)
    if url:
        try:
            with floor(args.store, url) as write:
                write()
        except Exception as exc:  # any client's error says the same
            sys.exit(f"{args.store} at {url} is unreachable ({exc}); set LOUSHO_*_URL")
    with tempfile.TemporaryDirectory() as base:
        got = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.baseline_ref, "lousho_sessions"],
            capture_output=True,
        )
        if got.returncode != 0:
            sys.exit(
                f"cannot take the baseline out of git ref {args.baseline_ref!r}: {got.stderr!r}"
            )
        subprocess.run(["tar", "-x", "-C", base], input=got.stdout, check=True)
        sources = {args.baseline_ref: base, "this checkout": str(ROOT)}
        what = f"{args.store} {url.rsplit('@', 1)[-1]}".strip()
        tools = "1 tool call" if args.tool else "no tool call"
        print(f"{what}, {tools}, {args.length:,} messages, {os.cpu_count()} CPUs", flush=True)
        if args.instructions:
            counted(args, sources, url)
            return
        if args.store != "memory":
            sources["floor"] = "floor"
        samples = timed(args, sources, url)
    flush = ", synchronous_commit=off" if args.no_flush else ""
    print(
        f"median µs per turn{flush}, {args.blocks} blocks of {args.block} per side, "
        f"interleaved; load {load()} at the end"
    )
    medians = {name: statistics.median(got) for name, got in samples.items()}
    first = medians[args.baseline_ref]
    for name, median in medians.items():
        by_floor = f" {median / medians['floor']:6.2f}x floor" if "floor" in medians else ""
        print(f"{name:>16} {median:8.0f} µs {median / first:6.3f}x baseline{by_floor}")


if __name__ == "__main__":
    main()
