"""Two versions of the package, one durable PostgreSQL turn each, timed in one run, interleaved.

On a shared machine the load changes from minute to minute, so figures taken in
different runs cannot be compared; this runs a baseline (by default the package
as of git ``main``, taken out with ``git archive`` into a temporary directory)
and this checkout side by side, each in a child process of its own, with the
floor of ``postgres_turns.py`` (one transaction of two ``INSERT``s), in blocks
that take turns. Each side: ``session.send`` with an instant model on a
``PostgresStore`` (checkpoints on), a conversation of ``--length`` messages, in
a schema of its own, dropped at the end.

``--no-flush`` runs every side with ``synchronous_commit=off`` for its own
connections (no other session is touched): what is left is the statements' and
the client's cost, which is what a quiet disk shows. Run:
``python benchmarks/postgres_ab.py [--baseline-ref main] [--length 1000] [--no-flush]``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

import psycopg

ROOT = Path(__file__).resolve().parent.parent
URL = os.environ.get("LOUSHO_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/test"
NO_FLUSH = "options=-c%20synchronous_commit%3Doff"
BODY = json.dumps({"role": "user", "content": [{"type": "text", "text": "weather?"}]})


def side(source: str, url: str, length: int) -> None:
    """A child: ``session.send`` blocks of the package in ``source`` (``floor``: the floor)."""
    schema = "ab_" + secrets.token_hex(4)
    if source == "floor":
        conn = psycopg.connect(url, autocommit=True, prepare_threshold=None)
        conn.execute(f'CREATE SCHEMA "{schema}"')
        table = f'"{schema}".floor'
        conn.execute(f"CREATE TABLE {table} (session_id text, seq integer, body json, PRIMARY KEY (session_id, seq))")  # fmt: skip
        seq = 0

        def turn() -> None:
            nonlocal seq
            with conn.transaction():
                conn.execute(f"INSERT INTO {table} VALUES (%s, %s, %s)", ("b", seq, BODY))
                conn.execute(f"INSERT INTO {table} VALUES (%s, %s, %s)", ("b", seq + 1, BODY))
            seq += 2

        try:
            serve(turn)
        finally:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        return
    sys.path.insert(0, source)
    import lousho_sessions
    from lousho_sessions import FunctionProvider, Message, create_agent
    from lousho_sessions.postgres import PostgresStore

    assert lousho_sessions.__file__.startswith(source), lousho_sessions.__file__

    store = PostgresStore(url, schema=schema, max_size=2)
    try:
        agent = create_agent(
            provider=FunctionProvider(lambda r: Message.assistant("It is sunny.")), store=store
        )
        history = [Message.user(f"q{n}") if n % 2 == 0 else Message.assistant(f"a{n}") for n in range(length)]  # fmt: skip
        store.sessions.save("s", history)
        session = agent.session("s")
        for _ in range(10):
            session.send("warm up")
        serve(lambda: session.send("weather?"))
        session.close()
        agent.close()
    finally:
        store.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def serve(turn: object) -> None:
    """Answer each line ``n`` on stdin with the µs of ``n`` turns, as a JSON list."""
    print("ready", flush=True)
    for line in sys.stdin:
        out = []
        for _ in range(int(line)):
            start = time.perf_counter()
            turn()  # type: ignore[operator]
            out.append((time.perf_counter() - start) * 1e6)
        print(json.dumps(out), flush=True)


def ask(child: subprocess.Popen[str], n: int) -> list[float]:
    stdin, stdout = child.stdin, child.stdout
    assert stdin is not None and stdout is not None
    stdin.write(f"{n}\n")
    stdin.flush()
    return list(json.loads(stdout.readline()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-ref", default="main", help="git ref of the baseline")
    parser.add_argument("--length", type=int, default=1_000, help="messages in the conversation")
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--block", type=int, default=20, help="turns per side and block")
    parser.add_argument("--no-flush", action="store_true", help="synchronous_commit=off")
    parser.add_argument("--side", nargs=2, help=argparse.SUPPRESS)  # a child: SOURCE URL
    args = parser.parse_args()
    if args.side:
        side(args.side[0], args.side[1], args.length)
        return
    url = URL + (("&" if "?" in URL else "?") + NO_FLUSH if args.no_flush else "")
    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.Error as exc:
        sys.exit(f"PostgreSQL at {URL} is unreachable ({exc}); set LOUSHO_POSTGRES_URL")
    with tempfile.TemporaryDirectory() as base:
        got = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.baseline_ref, "lousho_sessions"],
            capture_output=True,
        )
        if got.returncode != 0:
            sys.exit(
                f"cannot take the baseline out of git ref {args.baseline_ref!r}: {got.stderr!r}"
            )
        archive = got.stdout
        subprocess.run(["tar", "-x", "-C", base], input=archive, check=True)
        sources = {args.baseline_ref: base, "this checkout": str(ROOT), "floor": "floor"}
        children = {
            name: subprocess.Popen(
                [sys.executable, __file__, "--length", str(args.length), "--side", src, url],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for name, src in sources.items()
        }
        try:
            for child in children.values():
                out: IO[str] | None = child.stdout
                assert out is not None and out.readline().strip() == "ready"
            load = "/".join(f"{x:.2f}" for x in os.getloadavg())
            print(f"PostgreSQL {URL.rsplit('@', 1)[-1]}, load {load} at start")
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
    load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    flush = "synchronous_commit=off" if args.no_flush else "flushed"
    print(
        f"median µs per turn at {args.length:,} messages ({flush}), {args.blocks} blocks of "
        f"{args.block} per side, interleaved; load {load} at the end"
    )
    floor = statistics.median(samples["floor"])
    for name in names:
        median = statistics.median(samples[name])
        print(f"{name:>16} {median:8.0f} µs {median / floor:6.2f}x floor")


if __name__ == "__main__":
    main()
