"""What building a request body costs each provider, per model call, at 10 and 1,000 messages.

A session sends its whole transcript with every model call. Each HTTP provider keeps,
per session, the JSON text of the turns its previous call sent and encodes only the
tail (``lousho_sessions/providers/_body_memo.py``). This replays sessions on top of 10
or 1,000 stored messages and times, per model call, in the same process and interleaved:

- ``fresh``: ``build_body`` then JSON-encoding the whole body (what every call did
  before the memo, and still does on a session's first call);
- ``memo``: ``encode_body``, what a call does now;
- ``before`` (with ``--before REV``): ``encode_body`` of the package as it was at git
  revision ``REV``, imported beside this one (``git archive``), on the same session.

The sessions:

- ``turns``: a tool-using session, two model calls a turn (user question, tool call,
  tool result, answer), on every wire with its default options;
- ``loop``: one question, then a long tool loop (a call and its result, then the next
  model call, ``--turns`` times) on the two wires whose body used to depend on more
  than the tail: OpenAI Responses with ``store=True`` (each answer is stored at OpenAI
  and the next call continues it: the call checks the digest of what that answer saw
  and records the new answer's, both timed with the body; ``fresh`` and ``before``
  hash the whole transcript, as every call did before the memo kept the hash) and
  Gemini 3 with calls that carry no thought signature (each model turn of the loop
  gets the signature placeholder; before the memo kept those turns as sent, every
  call encoded the whole loop again).

Every body is checked equal to the fresh one (``tests/test_body_memo.py`` checks random
sessions). Target: the memo's time at 1,000 messages well under a millisecond, flat in
the transcript's length and in the loop's.

Run: ``python benchmarks/request_bodies.py`` (``--turns N``, default 30; ``--before
a3c5461`` for the package before the memo covered the two loops). Times are CPU time
(``process_time``), so other work on the machine counts less.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import io
import itertools
import json
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs

import lousho_sessions
from lousho_sessions.providers.openai_responses import stamp

ROOT = Path(__file__).resolve().parent.parent
URL = "http://127.0.0.1:9"
SYSTEM = "You are a careful research assistant who cites every figure. " * 100
PARAMETERS = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["query", "limit"],
}

#: (name, session, provider module and class, options)
CASES = [
    ("anthropic", "turns", "anthropic.AnthropicProvider", "claude-sonnet-4-5", {}),
    ("openai-chat", "turns", "openai.OpenAIProvider", "gpt-5", {}),
    ("openai-responses", "turns", "openai_responses.OpenAIResponsesProvider", "gpt-5", {}),
    ("gemini", "turns", "gemini.GeminiProvider", "gemini-3-pro-preview", {}),
    ("responses store", "loop", "openai_responses.OpenAIResponsesProvider", "gpt-5", {"store": True}),
    ("gemini unsigned", "loop", "gemini.GeminiProvider", "gemini-3-pro-preview", {}),
]  # fmt: skip

#: what a stored answer carries (``openai_responses.RESPONSE_ID`` and ``CONTEXT``)
RESPONSE_ID, CONTEXT = "openai_response_id", "openai_context"


@attrs.frozen
class Call:
    """One model call of a session: its request, and the answer it got when that answer
    is stored at OpenAI (recorded with its id and digest after the call)."""

    request: Any
    answer: Any = None


def history(pkg: ModuleType, n: int) -> list[Any]:
    """``n`` stored messages of a tool-using session (as ``benchmarks/token_cost.py``)."""
    messages: list[Any] = []
    usage = pkg.Usage(5000, 200, 0.001, cache_read_tokens=4500)
    for i in range(n // 4 + 1):
        call = pkg.ToolCall(f"p{i}", "search", {"query": f"r{i}", "limit": 5})
        messages += [
            pkg.Message.user(f"Question {i}: what changed in region {i} last quarter?"),
            pkg.Message.assistant("", tool_calls=[call], usage=usage),
            pkg.Message.tool(f"p{i}", "a figure, its source and a note. " * 8),
            pkg.Message.assistant("The figures rose by a small margin. " * 4, usage=usage),
        ]
    return messages[:n]


def session(pkg: ModuleType, kind: str, stored: int, turns: int, store: bool) -> list[Call]:
    """The model calls of a ``kind`` session after ``stored`` messages, built with ``pkg``'s
    classes; with ``store``, each answer with a call is recorded as stored at OpenAI."""
    base = importlib.import_module(pkg.__name__ + ".providers.base")
    items = importlib.import_module(pkg.__name__ + ".providers._responses_items")
    tools = (base.ToolSpec("search", "Search the records.", PARAMETERS),)
    messages = history(pkg, stored)
    out: list[Call] = []

    def ask(answer: Any = None) -> None:
        request = base.ModelRequest(SYSTEM, tuple(messages), tools, session_id="bench")
        if answer is not None and store:
            seen = items.input_items((*messages, answer), store=True)
            extra = {**answer.extra, RESPONSE_ID: f"resp_{len(out)}"}
            extra[CONTEXT] = items.context_digest(seen)
            answer = attrs.evolve(answer, extra=extra)
        out.append(Call(request, answer if store else None))
        if answer is not None:
            messages.append(answer)

    def call(n: int) -> Any:
        arguments = {"query": f"region {n}", "limit": 5}
        return pkg.Message.assistant("", tool_calls=[pkg.ToolCall(f"t{n}", "search", arguments)])

    if kind == "loop":
        messages.append(pkg.Message.user("Collect every region's figures, one search each."))
    for n in range(turns):
        if kind == "turns":
            messages.append(pkg.Message.user(f"Question {n}: how did region {n} change?"))
        ask(call(n))
        messages.append(pkg.Message.tool(f"t{n}", "a figure, its source and a note. " * 35))
        if kind == "turns":
            ask(pkg.Message.assistant("The figures rose by a small margin. " * 4))
    ask()
    return out


def provider(pkg: ModuleType, path: str, model: str, options: dict[str, Any]) -> Any:
    module, name = path.split(".")
    cls = getattr(importlib.import_module(f"{pkg.__name__}.providers.{module}"), name)
    return cls(model, api_key="k", base_url=URL, **options)


def fresh_call(made: Any, call: Call) -> bytes:
    """The whole body built and encoded; a stored answer's digest over the whole transcript."""
    data: bytes = made._http.encode(made.build_body(call.request))
    if call.answer is not None:
        stamp(call.answer, call.answer.extra[RESPONSE_ID], call.request.messages, None)
    return data


def memo_call(made: Any, call: Call) -> bytes:
    """The body from the memo, as a model call sends it (a view of the buffer the memo keeps,
    on the wires that keep one); a stored answer's digest from the hash it kept."""
    if call.answer is None:
        data: bytes = made._request_body(call.request)
        return data
    encoded = made._encode(call.request, continuation=True)
    messages = call.request.messages
    recorded = stamp(call.answer, call.answer.extra[RESPONSE_ID], messages, encoded.seen)
    assert recorded.extra == call.answer.extra
    return bytes(encoded.data)


def before_call(pkg: ModuleType) -> Callable[[Any, Call], bytes]:
    """A call of ``pkg``'s provider: its ``encode_body`` and, for a stored answer, the
    digest its ``_finish`` computed over the whole transcript."""
    items = importlib.import_module(pkg.__name__ + ".providers._responses_items")

    def run(made: Any, call: Call) -> bytes:
        data: bytes = made.encode_body(call.request)
        if call.answer is not None:
            items.context_digest(
                items.input_items((*call.request.messages, call.answer), store=True)
            )
        return data

    return run


def load(rev: str) -> ModuleType:
    """The package as it was at git revision ``rev``, imported as ``lousho_before``."""
    tar = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "lousho_sessions"],
        capture_output=True,
        check=True,
    ).stdout
    where = Path(tempfile.mkdtemp(prefix="lousho-before-"))
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        if hasattr(tarfile, "data_filter"):
            archive.extractall(where, filter="data")
        else:  # pragma: no cover - Python before 3.10.12
            archive.extractall(where)  # our own repository's archive
    (where / "lousho_sessions").rename(where / "lousho_before")
    sys.path.insert(0, str(where))
    return importlib.import_module("lousho_before")


def timed(runs: list[tuple[Callable[[Any, Call], bytes], Any, list[Call]]]) -> list[list[float]]:
    """CPU seconds per call of each run, interleaved call by call in every order in turn
    (a run that follows the whole build finds the caches cold: none may always follow
    it); every body checked equal to the first run's."""
    times: list[list[float]] = [[] for _ in runs]
    for run, made, calls in runs:
        run(made, calls[0])  # the session's first call encodes everything
    orders = itertools.cycle(itertools.permutations(range(len(runs))))
    for n in range(1, len(runs[0][2])):
        bodies: list[bytes] = [b""] * len(runs)
        for which in next(orders):
            run, made, calls = runs[which]
            start = time.process_time()
            body = run(made, calls[n])
            times[which].append(time.process_time() - start)
            bodies[which] = bytes(body)  # a view lets go of the buffer (as a sent body does)
            del body
        first = json.loads(bodies[0])
        assert all(json.loads(body) == first for body in bodies[1:])
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--before", metavar="REV", help="also time encode_body at git REV")
    args = parser.parse_args()
    before = load(args.before) if args.before else None
    columns = ["fresh", "memo"] + (["before"] if before else [])
    print("request body per model call (ms of CPU): median / p90, " + " vs ".join(columns))
    for stored in (10, 1000):
        for name, kind, path, model, options in CASES:
            store = bool(options.get("store"))
            calls = session(lousho_sessions, kind, stored, args.turns, store)
            runs: list[tuple[Callable[[Any, Call], bytes], Any, list[Call]]] = [
                (fresh_call, provider(lousho_sessions, path, model, options), calls),
                (memo_call, provider(lousho_sessions, path, model, options), calls),
            ]
            if before is not None:
                old = session(before, kind, stored, args.turns, store)
                runs.append((before_call(before), provider(before, path, model, options), old))
            cells = []
            for times in timed(runs):
                times.sort()
                median, p90 = statistics.median(times), times[int(len(times) * 0.9)]
                cells.append(f"{median * 1000:7.3f} / {p90 * 1000:7.3f}")
            print(f"  {name:16} {kind:5} {stored:>5} messages: " + "   ".join(cells))


if __name__ == "__main__":
    main()
