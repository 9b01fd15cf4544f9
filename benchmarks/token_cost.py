"""What prompt caching saves a long session, and what our own code costs per model call.

1. Cache: a 30-turn session (a 1,500-token system prompt, one tool, one tool call per
   turn: two model calls a turn) against ``tests/cache_server.py``, a loopback server
   that reports cache hits by each vendor's documented rules (Anthropic: the longest
   prefix ending at an earlier ``cache_control`` mark, looking back 20 blocks; OpenAI:
   prefixes of at least 1,024 tokens in 128-token steps). Per turn it prints the share of
   input tokens read from the cache and the billed input cost, with caching on (the
   default) and off (``cache=False``), priced as ``claude-sonnet-4-5`` and ``gpt-5`` from
   the built-in table. OpenAI caches whether asked or not, so its "off" run still reads
   from the cache; the table also gives the cost of the same input with no cache at all.
   Targets: from turn 5 on, >= 85% of input tokens read from the cache on both servers;
   the 30 turns' billed input cost <= 0.3x the uncached run.
2. Our time per model call, at 10 and 1,000 stored messages: from ``send()`` to the
   request reaching the server, plus from the server's last byte to the next request (the
   tool runs in between) or to ``send()`` returning, per model call (memory and SQLite
   stores). The tool, a search, is declared ``read_only`` (it changes nothing): its step is
   saved in one write once the next request has left; for comparison the first run also
   times SQLite at 1,000 messages with the tool not declared so (its step's response saved
   before it runs). Target: <= 1 ms at 1,000 messages. Twice: with the server answering as soon
   as it has worked out its answer (3-6 ms at 10 messages, about 40 ms at 1,000: it parses
   and checks the body against the vendor's request type), and streaming as a model does
   (``--hold``): the answer's first events at once, its last event 100 ms after the
   request arrived, as a real model takes at least that long. The second is the fair
   comparison of the two lengths and the one a user sees: the client reads the earlier
   events while the model works, and after a wait its code runs from cold caches,
   whatever the transcript's length. Each time is given three ways: by the server's
   stamps (the request's first line read, the answer's last write; they include both
   processes' wake-ups), by the client socket's (the request's last byte sent, the
   answer's last byte read: what the target names; on a 2-CPU machine a send can wait
   while the server it woke runs on the client's CPU, so these include some of the
   server's time) and as our process's CPU time (every thread's) over the client
   socket's spans: our own work, cache misses included, without anyone else's. A third
   run, for comparison only, uses an instant server (it answers as soon as it has read the
   body, from its last message, checking nothing): no wait of the server's cools our
   process's caches, so it shows what our code costs warm.
3. The machine's speed is not steady: on the 2-CPU VMs this is measured on, the same code
   against the instant server took 0.39 ms a call and, 15 minutes later, 0.75 ms (another
   tenant's load on the host; nothing else ran here). Interference only ever adds time,
   so the timing runs (answered at once, then streamed) are taken ``--repeat`` times in
   turn (default 3) and the verdict takes each configuration's lowest median across the
   runs, as ``timeit`` takes the lowest of its repeats; every run's median is printed, and
   so is the highest median of any single run.

Run: ``python benchmarks/token_cost.py`` (about seven minutes; ``--turns N`` for a shorter
cache run, ``--repeat 1`` for one timing run, ``--quick`` for a smoke run of a few seconds).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from cache_server import CacheServer

from lousho_sessions import Message, ToolCall, Usage, create_agent, memory_store, tool
from lousho_sessions.pricing import Pricing, lookup_pricing
from lousho_sessions.providers import _direct
from lousho_sessions.providers.anthropic import AnthropicProvider
from lousho_sessions.providers.openai import OpenAIProvider

MODELS = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-5"}
SYSTEM = "You are a careful research assistant who cites every figure. " * 100  # ~1,500 tokens


def _search(query: str, limit: int) -> str:
    """Search the records for ``query``; at most ``limit`` results."""
    return f"{limit} records for {query!r}: " + "a figure, its source and a note. " * 35


#: the session's tool, declared as what it is: a search changes nothing (docs/durable.md,
#: "Tools that only read": its step is saved in one write while the next call is under way)
search = tool(read_only=True, name="search")(_search)
#: the same tool not declared read-only: its step's response is saved before it runs
search_unmarked = tool(name="search")(_search)


def provider(wire: str, url: str, cache: bool) -> Any:
    if wire == "anthropic":
        return AnthropicProvider(MODELS[wire], api_key="k", base_url=url, cache=cache)
    return OpenAIProvider(MODELS[wire], api_key="k", base_url=url + "/v1", cache=cache)


def price(wire: str) -> Pricing:
    found = lookup_pricing(MODELS[wire])
    assert found is not None
    return found


def input_cost(usage: Usage, p: Pricing) -> float:
    """The billed cost of ``usage``'s input tokens (reads and writes at their rates)."""
    return p.cost(
        usage.input_tokens,
        0,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
    )


def run_session(wire: str, cache: bool, turns: int) -> list[Usage]:
    """The usage of each turn of a ``turns``-turn session (two model calls a turn)."""
    with CacheServer() as server:
        agent = create_agent(
            SYSTEM, provider=provider(wire, server.url, cache), tools=[search], store=memory_store()
        )
        session = agent.session("bench-session")
        per_turn = []
        for n in range(turns):
            result = session.send(f"Question {n}: how did the figures for region {n} change?")
            assert result.finish_reason == "stop" and result.steps == 2, result
            per_turn.append(result.usage)
        agent.close()
        return per_turn


def cache_report(turns: int) -> bool:
    ok = True
    for wire in ("anthropic", "openai"):
        p = price(wire)
        on, off = run_session(wire, True, turns), run_session(wire, False, turns)
        print(f"\n{wire} ({MODELS[wire]}: input ${p.input_per_million}/M, cache read "
              f"${p.cache_read_per_million}/M, write ${p.cache_write_per_million}/M)")  # fmt: skip
        print(f"{'turn':>4} {'input':>7} {'cached on':>9} {'cached off':>10} "
              f"{'$ on':>9} {'$ off':>9} {'$ no cache':>10}")  # fmt: skip
        for n, (a, b) in enumerate(zip(on, off, strict=True), start=1):
            print(f"{n:>4} {a.input_tokens:>7} {a.cache_read_tokens / a.input_tokens:>9.1%} "
                  f"{b.cache_read_tokens / b.input_tokens:>10.1%} {input_cost(a, p):>9.5f} "
                  f"{input_cost(b, p):>9.5f} {p.cost(a.input_tokens, 0):>10.5f}")  # fmt: skip
        total_on = sum(input_cost(u, p) for u in on)
        total_off = sum(input_cost(u, p) for u in off)
        uncached = sum(p.cost(u.input_tokens, 0) for u in on)
        worst = min(u.cache_read_tokens / u.input_tokens for u in on[4:])
        print(f"{turns} turns: billed input ${total_on:.4f} with caching, ${total_off:.4f} "
              f"with cache=False, ${uncached:.4f} with no cache at all; ratio to the "
              f"uncached run {total_on / uncached:.3f} (target <= 0.3); lowest cached "
              f"share from turn 5 on {worst:.1%} (target >= 85%)")  # fmt: skip
        ok = ok and total_on <= 0.3 * uncached and worst >= 0.85
    return ok


def prefill(n: int) -> list[Message]:
    """``n`` messages of a tool-using session: user, tool call, tool result, answer."""
    messages: list[Message] = []
    usage = Usage(5000, 200, 0.001, cache_read_tokens=4500)
    for i in range(n // 4 + 1):
        messages += [
            Message.user(f"Question {i}: what changed in region {i} last quarter?"),
            Message.assistant(
                "",
                tool_calls=[ToolCall(f"p{i}", "search", {"query": f"r{i}", "limit": 5})],
                usage=usage,
            ),
            Message.tool(f"p{i}", "a figure, its source and a note. " * 8),
            Message.assistant("The figures rose by a small margin. " * 4, usage=usage),
        ]
    return messages[:n]


@contextlib.contextmanager
def server_process(hold: float = 0.0, instant: bool = False) -> Iterator[str]:
    """``tests/cache_server.py`` in a process of its own (its clock, ``perf_counter``, is
    the machine's monotonic clock), answering ``hold`` seconds after a request arrives at
    the soonest (``instant``: as soon as it is read, checking nothing): its base URL."""
    script = Path(__file__).resolve().parent.parent / "tests" / "cache_server.py"
    child = subprocess.Popen(
        [sys.executable, str(script), str(hold), *(["instant"] if instant else [])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        yield child.stdout.readline().strip()
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(30)


#: a client socket's stamp: what happened, the clock, and the process's CPU time then
Stamp = tuple[str, float, float]


class _Stamped:
    """A client socket that notes when each send ends and each read returns (the clock and
    the process's CPU time, every thread's); a plain socket sends a request in one
    ``sendmsg``, a TLS one with ``sendall``."""

    def __init__(self, sock: Any, log: list[Stamp]) -> None:
        self._sock = sock
        self._log = log

    def sendall(self, data: Any, *args: Any) -> None:
        self._sock.sendall(data, *args)
        self._log.append(("sent", time.perf_counter(), time.process_time()))

    def sendmsg(self, buffers: Any, *args: Any) -> int:
        sent: int = self._sock.sendmsg(buffers, *args)
        self._log.append(("sent", time.perf_counter(), time.process_time()))
        return sent

    def recv(self, size: int, *args: Any) -> bytes:
        data: bytes = self._sock.recv(size, *args)
        self._log.append(("read", time.perf_counter(), time.process_time()))
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


@contextlib.contextmanager
def client_stamps(log: list[Stamp]) -> Iterator[None]:
    """The model calls' connections (``providers._direct``) stamp ``log`` meanwhile."""
    init = _direct.DirectConnection.__init__

    def stamped(self: Any, conn: Any) -> None:
        init(self, conn)
        self.sock = _Stamped(self.sock, log)

    _direct.DirectConnection.__init__ = stamped  # type: ignore[method-assign]
    try:
        yield
    finally:
        _direct.DirectConnection.__init__ = init  # type: ignore[method-assign]


def client_side(log: list[Stamp], start: float, end: float, clock: int = 1) -> float:
    """Our seconds in a turn as the client's socket saw them: from ``start`` to the first
    request's last byte sent, from each answer's last byte read to the next request sent,
    and from the last answer's last byte read to ``end``; by the clock (``clock=1``) or in
    the process's CPU time (``clock=2``, ``start`` and ``end`` in CPU time too)."""
    ours, mark = 0.0, start
    for at, stamp in enumerate(log):
        kind, when = stamp[0], stamp[1] if clock == 1 else stamp[2]
        following = log[at + 1][0] if at + 1 < len(log) else None
        if kind == "sent" and following != "sent":  # a request has left
            ours += when - mark
        elif kind == "read" and following != "read":  # an answer's last byte is here
            mark = when
    return ours + (end - mark)


def overhead(
    wire: str,
    store_factory: Callable[[], Any],
    stored: int,
    turns: int,
    hold: float = 0.0,
    instant: bool = False,
    read_only: bool = True,
) -> tuple[list[float], list[float], list[float]]:
    """Our seconds per model call, one value per turn, with ``stored`` messages before: as
    the server's stamps tell, as the client's socket tells, and our process's CPU time over
    the client socket's spans. ``read_only=False``: the tool is not declared read-only."""
    log: list[Stamp] = []
    with server_process(hold, instant) as url, requests.Session() as control, client_stamps(log):
        store = store_factory()
        tools = [search if read_only else search_unmarked]
        agent = create_agent(SYSTEM, provider=provider(wire, url, True), tools=tools, store=store)
        agent.store.sessions.save("timed", prefill(stored))
        session = agent.session("timed")
        session.load()
        session.send("warm up")
        per_call, client, cpu = [], [], []
        for n in range(turns):
            control.get(url + "/clear").raise_for_status()
            log.clear()
            start, start_cpu = time.perf_counter(), time.process_time()
            session.send(f"Question {n}?")
            end, end_cpu = time.perf_counter(), time.process_time()
            first, second = control.get(url + "/served").json()
            ours = (first["received"] - start) + (second["received"] - first["last_byte"])
            ours += end - second["last_byte"]
            per_call.append(ours / 2)
            client.append(client_side(log, start, end) / 2)
            cpu.append(client_side(log, start_cpu, end_cpu, clock=2) / 2)
        agent.close()
        return per_call, client, cpu


#: one configuration of the timing runs: wire, store, messages stored, tool declared read-only
Config = tuple[str, str, int, bool]


def timing_report(
    turns: int, hold: float, instant: bool = False, unmarked: bool = False, label: str = ""
) -> dict[Config, tuple[float, float, float]]:
    """Print our time per model call; per configuration the medians (ms) by the server's
    stamps, by the client's and in our CPU time. ``unmarked``: also, for comparison,
    SQLite at 1,000 messages with the tool not declared read-only."""
    if instant:
        when = "an instant server (it reads the body, checks nothing, answers at once)"
    elif hold:
        when = f"each answer streamed, its last event {hold * 1000:.0f} ms after the request"
    else:
        when = "the server answering as soon as it can"
    print(f"\nour time per model call (ms), {when}{label}: median / p90 over turns,")
    print("  by the server's stamps | by the client socket's | our process's CPU time")
    medians: dict[Config, tuple[float, float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        stores: dict[str, Callable[[], Any]] = {"memory": memory_store}
        counter = iter(range(1000))

        def sqlite() -> Any:
            from lousho_sessions.sqlite import SqliteStore

            return SqliteStore(str(Path(tmp) / f"s{next(counter)}.db"))

        stores["sqlite"] = sqlite
        runs = [(wire, name, stored, True) for wire in ("anthropic", "openai")
                for name in stores for stored in (10, 1000)]  # fmt: skip
        if unmarked:
            runs += [(wire, "sqlite", 1000, False) for wire in ("anthropic", "openai")]
        for wire, name, stored, read_only in runs:
            server, client, cpu = overhead(
                wire, stores[name], stored, turns, hold, instant, read_only
            )
            median, p90 = _summary(server)
            client_median, client_p90 = _summary(client)
            cpu_median, cpu_p90 = _summary(cpu)
            print(f"  {wire:9} {name:6} {stored:>5} messages: {median:.3f} / {p90:.3f}"
                  f" | {client_median:.3f} / {client_p90:.3f}"
                  f" | {cpu_median:.3f} / {cpu_p90:.3f}"
                  f"{'' if read_only else '  (tool not read-only: comparison)'}")  # fmt: skip
            medians[(wire, name, stored, read_only)] = (median, client_median, cpu_median)
    return medians


def best_of(runs: list[dict[Config, tuple[float, float, float]]]) -> tuple[float, float, float]:
    """The worst, over the 1,000-message configurations (tool read-only), of each
    configuration's lowest median across ``runs``: by the server's stamps, the client's and
    in CPU time."""
    worst = [0.0, 0.0, 0.0]
    for config in runs[0]:
        if config[2] != 1000 or not config[3]:
            continue
        for n in range(3):
            worst[n] = max(worst[n], min(run[config][n] for run in runs))
    return worst[0], worst[1], worst[2]


def _runs(n: int) -> str:
    return "1 run" if n == 1 else f"{n} runs"


def best_report(name: str, runs: list[dict[Config, tuple[float, float, float]]]) -> None:
    """Print each configuration's lowest median across ``runs`` and every run's."""
    print(f"\n{name}, 1,000 messages, lowest median of {_runs(len(runs))} (every run's)")
    for config in runs[0]:
        if config[2] != 1000:
            continue
        wire, store, _, read_only = config
        cells = []
        for n in range(3):
            values = [run[config][n] for run in runs]
            every = ", ".join(f"{v:.3f}" for v in values)
            cells.append(f"{min(values):.3f} ({every})")
        print(f"  {wire:9} {store:6} " + " | ".join(cells)
              + ("" if read_only else "  (tool not read-only: comparison)"))  # fmt: skip


def _summary(seconds: list[float]) -> tuple[float, float]:
    """Median and 90th percentile, in ms."""
    times = sorted(seconds)
    return statistics.median(times) * 1000, times[int(len(times) * 0.9) - 1] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--timed-turns", type=int, default=40)
    parser.add_argument(
        "--hold", type=float, default=0.1, help="seconds the server holds each answer (2nd run)"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="timing runs, answered at once and streamed, taken in turn",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 5 cache turns, 6 timed, one run"
    )
    args = parser.parse_args()
    if args.quick:
        args.turns, args.timed_turns, args.repeat = 5, 6, 1
    cached = cache_report(args.turns)
    at_once: list[dict[Config, tuple[float, float, float]]] = []
    held: list[dict[Config, tuple[float, float, float]]] = []
    for n in range(max(args.repeat, 1)):
        label = f" (run {n + 1} of {max(args.repeat, 1)})"
        at_once.append(timing_report(args.timed_turns, 0.0, unmarked=True, label=label))
        if args.hold:
            held.append(timing_report(max(args.timed_turns // 2, 5), args.hold, label=label))
    held = held or at_once
    warm = best_of([timing_report(args.timed_turns, 0.0, instant=True)])
    best_report("answered at once", at_once)
    best_report("streamed", held)
    print(f"\ncache targets {'met' if cached else 'MISSED'}")
    hows = ("the server's stamps", "the client socket's stamps", "our process's CPU time")
    best_at_once, best_held = best_of(at_once), best_of(held)
    for n, how in enumerate(hows):
        single = max(max(run[c][n] for c in run if c[2] == 1000 and c[3]) for run in at_once + held)
        worst = max(best_at_once[n], best_held[n])
        print(f"time target (<= 1 ms at 1,000 messages) by {how}: "
              f"{'met' if worst <= 1.0 else 'MISSED'}: "
              f"{best_at_once[n]:.3f} ms answered at once, {best_held[n]:.3f} ms streamed "
              f"(each configuration's lowest median of {_runs(len(at_once))}; the highest "
              f"median of any single run {single:.3f})")  # fmt: skip
    print(
        f"for comparison, not the target: an instant server (no wait cools our caches), "
        f"{warm[2]:.3f} ms of our CPU time, {warm[1]:.3f} ms by the client socket's stamps"
    )


if __name__ == "__main__":
    main()
