"""Our CPU time per model call, this checkout against another revision, turn by turn.

``token_cost.py`` times each configuration in a run of its own, and on a shared 2-CPU
machine the same code measures 0.6 ms a call in one minute and 1.2 ms in the next: two
runs a minute apart differ by more than most changes do. Here two client processes, one
importing this checkout's ``lousho_sessions`` and one a ``git worktree`` of ``--before``
(made in a temporary directory, removed after), each with a session of ``--messages``
stored messages and its own loopback server (``tests/cache_server.py``), take turns
alternately (ABBA: before, now, now, before, ...), so both sides meet the machine in the
same moments; half the turns with one side started first, half with the other (the
side started second measured a few per cent faster running the same code). Each turn is timed as ``token_cost.py`` times it (our process's CPU time
from ``send()`` to the request leaving, and from each answer's last byte to the next
request or to ``send()`` returning, per model call). Printed per configuration: the
median of each side, their ratio, and the median of the turn-by-turn ratios.

Run: ``python benchmarks/paired_calls.py --before REV [--turns 100] [--messages 1000]
[--config anthropic:memory:0 --config openai:sqlite:0.1 ...] [--instructions N]`` (wire, store,
hold in s).
With ``--before HEAD`` both sides run the same code: the spread of that run is the
harness's own (a few per cent).

``--instructions N`` counts instead of timing, which no load or slow spell of the machine
changes: each side's process runs under ``valgrind --tool=callgrind`` twice, its session
made and warmed up, then 0 and ``N`` turns, and the difference of the instructions it
executed, over the ``2 N`` model calls, is printed per side and configuration with the
ratio. It counts all of the process's work for a call, what it does while the model
works too (the owed checkpoint writes, the earlier events of a streamed answer), and
none of the server's (a process of its own, not traced).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import turn_ab

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_CONFIGS = [
    "anthropic:memory:0",
    "openai:sqlite:0",
    "anthropic:sqlite:0.1",
    "openai:memory:0.1",
]


def worker(wire: str, store: str, hold: float, stored: int, counting: bool = False) -> None:
    """One side: a session ready, then a turn for each line read, its CPU ms a call printed.
    ``counting`` (under callgrind): nothing asked of the server between turns."""
    sys.path.insert(0, str(HERE))
    import requests
    import token_cost as tc

    from lousho_sessions import create_agent, memory_store
    from lousho_sessions.sqlite import SqliteStore

    log: list[Any] = []
    with tempfile.TemporaryDirectory() as tmp:
        factory: Any = memory_store
        if store == "sqlite":
            factory = lambda: SqliteStore(str(Path(tmp) / "s.db"))  # noqa: E731
        with (
            tc.server_process(hold) as url,
            requests.Session() as control,
            tc.client_stamps(log),
        ):
            agent = create_agent(
                tc.SYSTEM, provider=tc.provider(wire, url, True), tools=[tc.search], store=factory()
            )
            agent.store.sessions.save("timed", tc.prefill(stored))
            session = agent.session("timed")
            session.load()
            session.send("warm up")
            print("ready", flush=True)
            for n, line in enumerate(sys.stdin):
                if line.strip() != "turn":
                    break
                if not counting:  # the server's stamps are not read: nothing to clear
                    control.get(url + "/clear").raise_for_status()
                log.clear()
                start = time.process_time()
                session.send(f"Question {n}?")
                end = time.process_time()
                print(f"{tc.client_side(log, start, end, clock=2) / 2 * 1000:.4f}", flush=True)
            agent.close()


class Side:
    """A worker process importing ``lousho_sessions`` from ``tree``."""

    def __init__(self, tree: Path, config: list[str], stored: int) -> None:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", *config, str(stored)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.stdin: IO[str] = self.process.stdin  # type: ignore[assignment]
        self.stdout: IO[str] = self.process.stdout  # type: ignore[assignment]
        ready = self.stdout.readline().strip()
        if ready != "ready":
            self.process.kill()
            raise RuntimeError(f"the worker for {tree} did not start (said {ready!r})")
        self.times: list[float] = []

    def turn(self) -> None:
        self.stdin.write("turn\n")
        self.stdin.flush()
        self.times.append(float(self.stdout.readline()))

    def close(self) -> None:
        self.stdin.write("done\n")
        self.stdin.flush()
        self.process.wait(60)


@contextlib.contextmanager
def worktree(rev: str) -> Iterator[Path]:
    """A detached ``git worktree`` of ``rev``, removed afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "before"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev],
            check=True,
            capture_output=True,
        )
        try:
            yield path
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
                check=False,
                capture_output=True,
            )


def executed(tree: Path, config: list[str], stored: int, turns: int) -> int:
    """Instructions a worker importing ``tree`` executes, under callgrind, for ``turns`` turns
    after its session is made and warmed up."""
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", *config, str(stored)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return turn_ab.executed([*command, "count"], env, "turn\n" * turns + "done\n")


def counted(before: Path, configs: list[list[str]], stored: int, turns: int) -> None:
    """Print the instructions a model call costs each side: (I(turns) - I(0)) / (2 turns)."""
    for config in configs:
        per_call = []
        for tree in (before, ROOT):
            base = executed(tree, config, stored, 0)
            per_call.append((executed(tree, config, stored, turns) - base) / (2 * turns))
        was, now = per_call
        print(f"  {':'.join(config):24} before {was:12,.0f}  now {now:12,.0f}  "
              f"ratio {now / was:.4f}", flush=True)  # fmt: skip


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        wire, store, hold, stored = sys.argv[2:6]
        worker(wire, store, float(hold), int(stored), sys.argv[6:7] == ["count"])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="the revision to compare with")
    parser.add_argument("--turns", type=int, default=100, help="turns a side and configuration")
    parser.add_argument("--messages", type=int, default=1000, help="stored messages")
    parser.add_argument("--config", action="append", help="wire:store:hold (repeatable)")
    parser.add_argument(
        "--instructions", type=int, metavar="N", help="count instructions over N turns instead"
    )
    args = parser.parse_args()
    configs = [c.split(":") for c in (args.config or DEFAULT_CONFIGS)]
    if args.instructions:
        print(f"instructions a model call executes in our process at {args.messages} messages "
              f"(callgrind, {args.instructions} turns), {args.before} against this checkout")  # fmt: skip
        with worktree(args.before) as before:
            counted(before, configs, args.messages, args.instructions)
        return
    print(f"our CPU ms per model call at {args.messages} messages, {args.before} against "
          f"this checkout, {args.turns} turns a side, alternating (ABBA)")  # fmt: skip
    with worktree(args.before) as before:
        for config in configs:
            was_times: list[float] = []
            now_times: list[float] = []
            # two rounds, the sides started in either order: the one started second was
            # measured a few per cent faster, the same code on both sides
            for first_old in (True, False):
                trees = (before, ROOT) if first_old else (ROOT, before)
                started = [Side(tree, config, args.messages) for tree in trees]
                old, new = started if first_old else started[::-1]
                try:
                    for n in range(args.turns // 2):
                        for side in (old, new) if n % 2 == 0 else (new, old):
                            side.turn()
                finally:
                    old.close()
                    new.close()
                was_times += old.times
                now_times += new.times
            ratios = [b / a for a, b in zip(was_times, now_times, strict=True)]
            was, now = statistics.median(was_times), statistics.median(now_times)
            print(f"  {':'.join(config):24} before {was:.3f}  now {now:.3f}  "
                  f"ratio {now / was:.3f}  turn by turn {statistics.median(ratios):.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
