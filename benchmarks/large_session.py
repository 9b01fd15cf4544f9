"""Loading a 50,000-message session from a ``SqliteStore``: time, and memory per message.

A transcript of alternating user questions and assistant answers (the answers with
usage, as a model's are) is saved once; then, in one run:

- the load time of ``store.sessions.load(id)`` (median of ``--rounds``; wall clock and the
  thread's CPU time, which another process's load disturbs less), and of a first
  ``session.load()`` through an agent (on its worker thread, with the revision);
- the memory the loaded transcript holds, measured with ``tracemalloc`` (the peak
  while loading and what stays allocated after), per message, minus the bytes of
  the messages' own text (``len(text.encode())``): what the data model costs.

Targets (issue 13): a 50,000-message session loads in well under a second and holds
under ~300 bytes per message beyond its text.

Run: ``python benchmarks/large_session.py [--quick]`` (or ``make bench``).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from lousho_sessions import FunctionProvider, Message, Usage, create_agent
from lousho_sessions.sqlite import SqliteStore

MESSAGES = 50_000
ROUNDS = 5


def machine() -> str:
    one, five, fifteen = os.getloadavg()
    return (
        f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1/5/15 min), {os.cpu_count()} CPUs"
    )


def transcript(length: int) -> list[Message]:
    out: list[Message] = []
    for n in range(length // 2):
        out.append(Message.user(f"Question {n}: what changed in the report for region {n % 7}?"))
        out.append(
            Message.assistant(
                "Revenue grew in most regions while costs stayed flat.", usage=Usage(1_200, 180)
            )
        )
    return out


def text_bytes(messages: list[Message]) -> int:
    return sum(len(m.text.encode()) for m in messages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 messages, 2 rounds")
    parser.add_argument("--messages", type=int, default=MESSAGES)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()
    length, rounds = (10_000, 2) if args.quick else (args.messages, args.rounds)
    print(f"large session: {length:,} messages from one SqliteStore; {machine()}")
    with tempfile.TemporaryDirectory() as tmp, SqliteStore(Path(tmp) / "large.db") as store:
        messages = transcript(length)
        store.sessions.save("big", messages)
        size = os.path.getsize(Path(tmp) / "large.db") + os.path.getsize(Path(tmp) / "large.db-wal")
        text = text_bytes(messages)
        del messages
        gc.collect()

        times, cpu = [], []
        for _ in range(rounds):
            start, start_cpu = time.perf_counter(), time.thread_time()
            loaded = store.sessions.load("big")
            times.append(time.perf_counter() - start)
            cpu.append(time.thread_time() - start_cpu)
            assert loaded is not None and len(loaded) == length
            del loaded
        agent = create_agent(
            provider=FunctionProvider(lambda r: Message.assistant("ok")), store=store
        )
        start = time.perf_counter()
        first = len(agent.session("big").load())
        through_agent = time.perf_counter() - start
        assert first == length
        agent.close()

        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        kept = store.sessions.load("big")
        after, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert kept is not None
        held = after - before
        per_message = held / length
        beyond_text = (held - text) / length

    load = statistics.median(times)
    print(f"  database on disk: {size / length:.0f} bytes per message")
    print(
        f"  load: median {load * 1000:.0f} ms of {rounds} ({load / length * 1e6:.2f} µs per "
        f"message; CPU {statistics.median(cpu) * 1000:.0f} ms); first session.load() through "
        f"an agent {through_agent * 1000:.0f} ms"
    )
    print(
        f"  memory held: {per_message:.0f} bytes per message, of which text "
        f"{text / length:.0f}: {beyond_text:.0f} bytes per message beyond its text "
        f"(peak while loading {(peak - before) / length:.0f} per message)"
    )
    ok_load = load < 0.5 * length / MESSAGES
    ok_memory = beyond_text < 300
    print(
        f"  targets: load of 50,000 well under 1 s (< 0.5 s scaled to {length:,}): "
        f"{'met' if ok_load else 'MISSED'}; < 300 bytes per message beyond its text: "
        f"{'met' if ok_memory else 'MISSED'}"
    )
    print(f"ended at {machine()}")


if __name__ == "__main__":
    main()
