"""The kit's tests of usage totals: ``usage(id)`` and ``Session.usage()`` sum the transcript."""

from __future__ import annotations

import math
from pathlib import Path

from ..errors import InvalidSessionIdError
from ..messages import Message, ToolCall, Usage
from ..usage_totals import SUMMARY_KEY, USAGE_FIELDS, transcript_usage
from ._base import KitBase, need_sessions
from ._support import raises


def _usages() -> list[Usage]:
    """Usages with every field set, some without the newer counts (read as 0)."""
    return [
        Usage(1200, 300, 0.0039),
        Usage(
            5000, 120, 0.0021, cache_read_tokens=4500, cache_write_tokens=400, reasoning_tokens=50
        ),
        Usage(7, 0, 0.0),
        Usage(9000, 64, 0.125, cache_read_tokens=8800, reasoning_tokens=32),
    ]


def _transcript() -> tuple[list[Message], list[Message]]:
    """A transcript with tool calls, a compaction summary carrying earlier spend, and usage
    on a message that is not the model's (which does not count)."""
    first, second, third, fourth = _usages()
    carried = {"usage": {**{name: 0 for name in USAGE_FIELDS}, "input_tokens": 40000,
                         "output_tokens": 900, "cost_usd": 0.5, "cache_read_tokens": 30000}}  # fmt: skip
    return [
        Message.user("Summary of the conversation so far: ...", metadata={SUMMARY_KEY: carried}),
        Message.user("look it up"),
        Message.assistant("", tool_calls=[ToolCall("c1", "lookup", {"q": 1})], usage=first),
        Message.tool("c1", "found it"),
        Message.assistant("Here it is.", usage=second),
        Message.user("thanks", usage=Usage(99, 99, 9.0)),
        Message.assistant("You're welcome."),  # no usage reported
        Message.assistant("Anything else?", usage=third),
    ], [Message.user("more"), Message.assistant("More.", usage=fourth)]


def same_usage(got: Usage, expected: Usage) -> bool:
    """Equal counts, and costs equal up to how a database adds floats."""
    counts = [getattr(got, n) for n in USAGE_FIELDS if n != "cost_usd"]
    return counts == [getattr(expected, n) for n in USAGE_FIELDS if n != "cost_usd"] and (
        math.isclose(got.cost_usd, expected.cost_usd, rel_tol=1e-9, abs_tol=1e-12)
    )


class UsageTests(KitBase):
    """Usage totals: what ``BaseSessionStore.usage`` and ``Session.usage()`` give."""

    def test_usage_is_the_sum_over_the_transcript(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            saved, appended = _transcript()
            assert sessions.usage("never") is None
            sessions.save("empty", [])
            assert sessions.usage("empty") == Usage()
            sessions.save("s1", saved)
            sessions.append("s1", appended, len(saved))
            stored = sessions.load("s1")
            assert stored is not None
            first, second, third, fourth = _usages()
            expected = (
                first + second + third + fourth + Usage(40000, 900, 0.5, cache_read_tokens=30000)
            )
            assert same_usage(transcript_usage(stored), expected)
            got = sessions.usage("s1")
            assert got is not None and same_usage(got, expected), got
            with raises(InvalidSessionIdError):
                sessions.usage("../x")

    def test_session_usage_is_the_sum_over_its_transcript(self, tmp_path: Path) -> None:
        from ..agent import create_agent
        from ..providers.function import ScriptedProvider

        with self.store(tmp_path) as parts:
            need_sessions(parts)
            replies = [Message.assistant(f"a{n}", usage=u) for n, u in enumerate(_usages())]
            agent = create_agent(provider=ScriptedProvider(replies), store=parts)
            try:
                session = agent.session("s-usage")
                assert session.usage() == Usage()
                for n in range(len(replies)):
                    session.send(f"q{n}")
                total = session.usage()
                assert same_usage(total, transcript_usage(session.load()))
                assert same_usage(total, sum(_usages(), Usage()))
            finally:
                agent.close()
