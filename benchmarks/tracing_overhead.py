"""What tracing adds to a durable SQLite turn: off, and on with a no-op exporter.

The turn: ``session.send`` with an instant ``FunctionProvider`` on a ``SqliteStore``
given whole to the agent (checkpoints on, the store's default ``synchronous="NORMAL"``),
with no tool call (2 spans) and with one tool call (4 spans). Configurations, each its
own agent and database, timed turn by turn in interleaved blocks so that a change in
machine load hits all of them. The figure is a paired ratio: per round, a
configuration's block median ÷ the "off" block median of that round, the median over
rounds (the median turn times are printed beside it). Each turn is timed twice: by the
wall clock, and by the CPU time of the whole process (all its threads; the turn runs
on a worker thread) — on a loaded machine the wall clock also counts the waits for a
CPU at each hand-over between the caller's thread and the worker's, and CPU time does
not.

- ``off``: no tracer or meter provider anywhere, so ``Telemetry.build`` returns
  ``None`` and the turn code skips every tracing call — the same path as with the
  ``otel`` extra absent. ``off again`` is a second such agent: the A/A ratio shows
  the noise of the measurement.
- ``sampled out``: an SDK ``TracerProvider`` whose sampler records nothing
  (``ALWAYS_OFF``, as most turns are under ratio sampling): our code runs, the SDK
  makes only the turn's non-recording span, and no children.
- ``our code alone``: a tracer whose spans record and do nothing (no SDK): our code
  with every span recorded, and the API's context calls (making each span current),
  and nothing of the SDK's.
- ``spans``: an SDK ``TracerProvider`` with a ``SimpleSpanProcessor`` exporting to
  an exporter that drops everything.
- ``spans (batch)``: a ``BatchSpanProcessor`` (what a user configures for export)
  with that exporter.
- ``spans+metrics``: the same as ``spans``, plus an SDK ``MeterProvider`` whose reader is never
  collected (the instruments record; nothing is exported).

Our part is what remains once the SDK's own work is taken away. The **SDK floor** is
that work made straight through the SDK, without a turn, on warm caches: per turn
the same spans (names, kinds, attributes, parents, made current in turn), and for a
sampled-out turn the one non-recording span. So ``spans - off - floor`` is our part
when the spans record (with whatever more the SDK costs inside a turn, on cold caches,
than in the floor's tight loop), ``sampled out - off - floor (sampled out)`` our part
when nothing records; ``our code alone - off`` measures the first directly. ``sdk
floor in a turn`` is an untraced turn whose model call makes the floor's spans: the
SDK's work on the turn's thread, among the turn's work (but all in one place, so
still warmer than spans started and ended at the turn's start, model call and end).

A child process with ``opentelemetry`` made unimportable checks that an agent then
imports nothing of it and traces nothing (and times its turns, for reference only:
another process is not interleaved).

``--latency MS`` makes each model call take that long (a realistic 1 to 50 ms shows
where the 5% sits; the default is an instant model, the worst case).

Run: ``python benchmarks/tracing_overhead.py [--quick] [--latency MS]`` (or ``make bench``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROUNDS = 1000  # timed turns per configuration
BLOCK = 10  # configurations alternate in blocks of this many turns
WARMUP = 30


def machine() -> str:
    one, five, fifteen = os.getloadavg()
    return (
        f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1/5/15 min), {os.cpu_count()} CPUs"
    )


#: seconds each model call takes (``--latency``): 0 is an instant model
LATENCY = 0.0


def make_turn(
    path: Path, with_tool: bool, inside: Callable[[], None] | None = None, **tracing: Any
) -> tuple[Callable[[], None], Any]:
    """A session's turn; ``inside`` is called in its last model call (on the turn's thread)."""
    from lousho_sessions import FunctionProvider, Message, ModelRequest, ToolCall, create_agent
    from lousho_sessions import tool as make_tool
    from lousho_sessions.sqlite import SqliteStore

    @make_tool
    def lookup(city: str) -> str:
        """Instant tool."""
        return "sunny"

    def model(request: ModelRequest) -> Message:
        if LATENCY:
            time.sleep(LATENCY)  # a model's response time (a benchmark, not a test)
        if with_tool and request.messages[-1].role != "tool":
            return Message.assistant("", tool_calls=[ToolCall("c1", "lookup", {"city": "Paris"})])
        if inside is not None:
            inside()
        return Message.assistant("Sunny.")

    store = SqliteStore(path)
    agent = create_agent(
        provider=FunctionProvider(model), tools=[lookup], store=store, name="bench", **tracing
    )
    session = agent.session("bench")

    def turn() -> None:
        session.send("weather?")

    def close() -> None:
        session.close()
        agent.close()
        store.close()

    return turn, (agent, close)


def turn_span_attributes() -> dict[str, Any]:
    """A turn span's attributes, made anew per turn (as a turn makes them)."""
    return {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": "function",
        "lousho.run.id": "run-x", "lousho.turn.attempt": 1, "lousho.turn.resumed": False,
        "gen_ai.agent.name": "bench", "gen_ai.conversation.id": "bench",
        "lousho.turn.id": "bench.turn-0", "lousho.lease.fence": 1,
    }  # fmt: skip


def sdk_floor(tracer: Any, with_tool: bool) -> Callable[[], None]:
    """The SDK's part alone: the spans a turn makes, made directly, without a turn."""
    from opentelemetry import context, trace

    kind = trace.SpanKind

    def span(name: str, parent: Any, span_kind: Any, attributes: dict[str, Any]) -> Any:
        made = tracer.start_span(name, context=parent, kind=span_kind, attributes=attributes)
        inside = trace.set_span_in_context(made)
        return made, inside, context.attach(inside)

    def chat(parent: Any, finish: str) -> None:
        made, _, token = span(
            "chat function", parent, kind.CLIENT,
            {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "function"},
        )  # fmt: skip
        context.detach(token)
        made.set_attributes(
            {"gen_ai.response.finish_reasons": (finish,), "gen_ai.usage.input_tokens": 0,
             "gen_ai.usage.output_tokens": 0}
        )  # fmt: skip
        made.end()

    def turn() -> None:
        attributes = turn_span_attributes()
        root, inside, token = span("invoke_agent bench", None, kind.INTERNAL, attributes)
        if with_tool:
            chat(inside, "tool_calls")
            made, _, inner = span(
                "execute_tool lookup", inside, kind.INTERNAL,
                {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
                 "gen_ai.tool.call.id": "c1", "gen_ai.tool.type": "function"},
            )  # fmt: skip
            context.detach(inner)
            made.end()
        chat(inside, "stop")
        context.detach(token)
        root.set_attributes(
            {"lousho.finish_reason": "stop", "gen_ai.usage.input_tokens": 0,
             "gen_ai.usage.output_tokens": 0}
        )  # fmt: skip
        root.end()

    return turn


def sdk_floor_sampled_out(tracer: Any) -> Callable[[], None]:
    """The SDK's part of a sampled-out turn: its one span, which the sampler drops
    (started with the turn span's attributes, made current, ended)."""
    from opentelemetry import context, trace

    def turn() -> None:
        attributes = turn_span_attributes()
        made = tracer.start_span("invoke_agent bench", kind=trace.SpanKind.INTERNAL,
                                 attributes=attributes)  # fmt: skip
        token = context.attach(trace.set_span_in_context(made))
        context.detach(token)
        made.end()

    return turn


class IdleSpan:
    """A span that records (``is_recording()``) and does nothing: no SDK behind it."""

    def __init__(self) -> None:
        from opentelemetry.trace import SpanContext, TraceFlags

        self.context = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331,
                                   False, TraceFlags(TraceFlags.SAMPLED))  # fmt: skip

    def is_recording(self) -> bool:
        return True

    def get_span_context(self) -> Any:
        return self.context

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Any) -> None:
        pass

    def set_status(self, status: Any, description: str | None = None) -> None:
        pass

    def end(self, end_time: int | None = None) -> None:
        pass


class IdleTracerProvider:
    """Tracers whose spans are one ``IdleSpan``: what tracing costs without the SDK."""

    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        span = IdleSpan()

        class Tracer:
            def start_span(self, *args: Any, **kwargs: Any) -> IdleSpan:
                return span

        return Tracer()


def sdk_providers() -> tuple[Any, Any, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class DropExporter(SpanExporter):
        """Exports to nothing."""

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(DropExporter()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return tracer_provider, meter_provider, tracer_provider.get_tracer("floor")


def batched() -> Any:
    """What a user configures for export: a ``BatchSpanProcessor`` (spans go to a
    background thread), here to an exporter that does nothing."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class DropExporter(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DropExporter()))
    return provider


def sampled_out() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    return TracerProvider(sampler=ALWAYS_OFF)


def timed(
    fn: Callable[[], None], times: list[float], n: int, cpu: list[float] | None = None
) -> None:
    """Run ``fn`` ``n`` times: each wall-clock time into ``times``, each CPU time of
    the process (all threads) into ``cpu``."""
    wall, process = time.perf_counter, time.process_time
    for _ in range(n):
        start, used = wall(), process()
        fn()
        if cpu is not None:
            cpu.append(process() - used)
        times.append(wall() - start)


#: per configuration and clock ("wall", "cpu"): the median turn, and the paired ratio to off
Figures = dict[str, dict[str, tuple[float, float]]]


def measure(with_tool: bool, rounds: int, tmp: Path) -> Figures:
    """Per clock and configuration: the median turn, and the median over rounds of its
    block's median ÷ the ``off`` block's median of that round (paired: a load change
    between rounds cancels out)."""
    tracer_provider, meter_provider, tracer = sdk_providers()
    unsampled = sampled_out()
    batch_provider = batched()
    made = {
        "off": make_turn(tmp / f"off-{with_tool}.db", with_tool),
        "off again": make_turn(tmp / f"off2-{with_tool}.db", with_tool),
        "sampled out": make_turn(tmp / f"out-{with_tool}.db", with_tool, tracer_provider=unsampled),
        "our code alone": make_turn(
            tmp / f"idle-{with_tool}.db", with_tool, tracer_provider=IdleTracerProvider()
        ),
        "spans": make_turn(
            tmp / f"spans-{with_tool}.db", with_tool, tracer_provider=tracer_provider
        ),
        # an untraced turn that makes the floor's spans in its model call: the SDK's
        # work inside a turn (on its thread, among its work), still all in one place
        "sdk floor in a turn": make_turn(
            tmp / f"floor-{with_tool}.db", with_tool, sdk_floor(tracer, with_tool)
        ),
        "spans (batch)": make_turn(
            tmp / f"batch-{with_tool}.db", with_tool, tracer_provider=batch_provider
        ),
        "spans+metrics": make_turn(
            tmp / f"both-{with_tool}.db",
            with_tool,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
        ),
    }
    assert made["off"][1][0].runner.telemetry is None
    assert made["spans"][1][0].runner.telemetry is not None
    fns = {name: turn for name, (turn, _) in made.items()}
    fns["sdk floor"] = sdk_floor(tracer, with_tool)
    fns["sdk floor (sampled out)"] = sdk_floor_sampled_out(unsampled.get_tracer("floor"))
    blocks: dict[str, dict[str, list[list[float]]]] = {
        clock: {name: [] for name in fns} for clock in ("wall", "cpu")
    }
    for fn in fns.values():
        timed(fn, [], WARMUP)
    done = 0
    order = list(fns.items())
    while done < rounds:
        n = min(BLOCK, rounds - done)
        for name, fn in order:
            blocks["wall"][name].append([])
            blocks["cpu"][name].append([])
            timed(fn, blocks["wall"][name][-1], n, blocks["cpu"][name][-1])
        done += n
        order = order[1:] + order[:1]  # each configuration in each place in turn
    for _, (_, close) in made.values():
        close()
    tracer_provider.shutdown()
    meter_provider.shutdown()
    unsampled.shutdown()
    batch_provider.shutdown()
    figures: Figures = {}
    for clock, by_name in blocks.items():
        off = by_name["off"]
        figures[clock] = {
            name: (
                statistics.median(t for b in bs for t in b),
                statistics.median(
                    statistics.median(mine) / statistics.median(theirs)
                    for mine, theirs in zip(bs, off, strict=True)
                ),
            )
            for name, bs in by_name.items()
        }
    return figures


def report(label: str, figures: Figures) -> None:
    """The figures of one turn shape, by clock, and our part in them."""
    print(f"{label}  [load {os.getloadavg()[0]:.2f}]")
    wall, cpu = figures["wall"], figures["cpu"]
    print(f"  {'':<24} {'wall clock':>20}   {'process CPU time':>20}")
    for name in wall:
        cells = "   ".join(f"{f[name][0] * 1e6:7.0f} µs  x{f[name][1]:.3f}" for f in (wall, cpu))
        print(f"  {name:<24} {cells}")
    for clock, f in (("wall clock", wall), ("CPU time", cpu)):
        off = f["off"][0]
        floor, out_floor = f["sdk floor"][1], f["sdk floor (sampled out)"][1]
        recorded = f["spans"][1] - 1 - floor
        unrecorded = f["sampled out"][1] - 1 - out_floor
        alone = f["our code alone"][1] - 1
        in_turn = f["sdk floor in a turn"][1] - 1
        print(f"  by {clock} (off = {off * 1e6:.0f} µs):")
        print(
            f"    sampled out: x{f['sampled out'][1]:.3f} of off (target <= x1.05); "
            f"the SDK's non-recording span alone {out_floor * 100:.1f}%, "
            f"our part {unrecorded * 100:+.1f}% ({unrecorded * off * 1e6:+.0f} µs)"
        )
        print(
            f"    spans: x{f['spans'][1]:.3f} of off; the SDK floor alone {floor * 100:.1f}% "
            f"({f['sdk floor'][0] * 1e6:.0f} µs), our part (spans - off - floor) "
            f"{recorded * 100:+.1f}% ({recorded * off * 1e6:+.0f} µs; target <= 5%); "
            f"our code alone, measured without the SDK, {alone * 100:+.1f}%"
        )
        print(
            f"    the SDK floor made inside an untraced turn: {in_turn * 100:+.1f}%, so "
            f"spans - that = {(f['spans'][1] - 1 - in_turn) * 100:+.1f}% "
            f"({(f['spans'][1] - 1 - in_turn) * off * 1e6:+.0f} µs)"
        )


BLOCKER = """
import json, sys, time
class Blocker:
    def find_spec(self, name, path, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(name, name=name)
sys.meta_path.insert(0, Blocker())
sys.path.insert(0, sys.argv[1])
from pathlib import Path
import tracing_overhead
from tracing_overhead import make_turn, timed
import statistics
tracing_overhead.LATENCY = float(sys.argv[4])
out = {}
for with_tool in (False, True):
    turn, (agent, close) = make_turn(Path(sys.argv[2]) / f"absent-{with_tool}.db", with_tool)
    assert agent.runner.telemetry is None
    times = []
    timed(turn, [], 30)
    timed(turn, times, int(sys.argv[3]))
    close()
    out[str(with_tool)] = statistics.median(times)
out["loaded"] = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
print(json.dumps(out))
"""


def extra_absent(rounds: int, tmp: Path) -> dict[str, Any]:
    here = str(Path(__file__).parent)
    done = subprocess.run(
        [sys.executable, "-c", BLOCKER, here, str(tmp), str(rounds), str(LATENCY)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--rounds", type=int, default=None, help=f"timed turns (default {ROUNDS})")
    parser.add_argument(
        "--latency", type=float, default=0.0, help="milliseconds each model call takes (0)"
    )
    args = parser.parse_args()
    global LATENCY
    LATENCY = args.latency / 1000
    rounds = args.rounds or (60 if args.quick else ROUNDS)
    print(
        f"tracing overhead of a durable SQLite turn (SqliteStore default synchronous=NORMAL, "
        f"checkpoints on), model latency {args.latency:g} ms; {machine()}"
    )
    print(
        f"{rounds} timed turns per configuration, interleaved in blocks of {BLOCK}, the order rotated"
    )
    print()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        absent = extra_absent(max(rounds // 2, 30), tmp)
        for with_tool, label in ((False, "no tool (2 spans)"), (True, "one tool (4 spans)")):
            report(label, measure(with_tool, rounds, tmp))
            print(
                f"  extra absent (child process, not interleaved, wall clock): "
                f"{absent[str(with_tool)] * 1e6:.0f} µs"
            )
            print()
    print(f"child with opentelemetry blocked imported: {absent['loaded'] or 'nothing of it'}")


if __name__ == "__main__":
    main()
