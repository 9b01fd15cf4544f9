"""An abort never drops a turn that was resumed or whose tools ran (issue 27, item 2).

A session holds a pending turn whose tool was interrupted (a crash inside the tool,
stood for by a ``PropagatingToolError`` after the tool's effect). A new
``send("hello", timeout=...)`` first finishes that turn; the timeout fires while the
re-run tool runs. The pending turn must stay pending with the re-run's result recorded,
so the next ``send()`` finishes it without running the tool a third time. Run on the
memory and SQLite stores, and on the real Redis and PostgreSQL servers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import WAIT, calls
from storekit import open_kit

from lousho_sessions import (
    AbortController,
    FunctionProvider,
    Message,
    ModelRequest,
    PropagatingToolError,
    ToolContext,
    create_agent,
    tool,
)


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """The agent's store (sessions, checkpoints and approvals in one) of each kind."""
    kind = request.param
    if kind == "redis":
        from services_redis import drop_prefix, prefix_for, redis_url, require_redis

        from lousho_sessions.redis import RedisStore

        require_redis()
        redis_store = RedisStore(redis_url(), prefix=prefix_for(tmp_path), lease_ttl=5.0)
        yield redis_store
        redis_store.close()
        drop_prefix(prefix_for(tmp_path))
    elif kind == "postgres":
        from services_pg import fresh_schema, postgres_url

        from lousho_sessions.postgres import PostgresStore

        schemas = fresh_schema()
        pg_store = PostgresStore(postgres_url(), schema=next(schemas))
        yield pg_store
        pg_store.close()
        next(schemas, None)  # drops the schema
    else:
        kit = open_kit(kind, tmp_path / "store")
        yield {"sessions": kit.sessions, "checkpoints": kit.checkpoints, "approvals": kit.approvals}
        kit.close()


class Payments:
    """A tool with an effect: the first run crashes after paying; a blocking run waits for
    its abort and finishes anyway (an effect that cannot be taken back)."""

    def __init__(self) -> None:
        self.paid: list[str] = []
        self.crash = True
        self.block = False
        self.running = threading.Event()

        @tool(idempotent=True)
        def pay(ctx: ToolContext, to: str) -> str:
            """Pay someone."""
            self.paid.append(ctx.idempotency_key)
            if self.crash:
                self.crash = False
                raise PropagatingToolError("the process died inside the tool")
            if self.block:
                self.block = False
                self.running.set()
                assert ctx.signal.wait(WAIT), "the turn was not aborted"
            return f"paid {to}"

        self.tool = pay


def model(request: ModelRequest) -> Message | str:
    last = request.messages[-1]
    if last.role == "user" and last.text == "pay Bob":
        return calls(("pay", {"to": "Bob"}))
    if last.role == "tool":
        return f"done: {last.text}"
    return f"you said {last.text}"


def test_a_timeout_while_finishing_a_pending_turn_keeps_it(store: Any) -> None:
    payments = Payments()
    agent = create_agent(provider=FunctionProvider(model), tools=[payments.tool], store=store)
    try:
        session = agent.session("s1")
        with pytest.raises(PropagatingToolError):
            session.send("pay Bob")
        assert session.pending() is not None and len(payments.paid) == 1

        payments.block = True
        result = session.send("hello", timeout=0.5)

        assert payments.running.is_set() and len(payments.paid) == 2
        assert result.finish_reason == "aborted"
        pending = session.pending()
        assert pending is not None and pending.turn_id == "s1.turn-0"
        assert session.load() == ()  # neither the pending turn nor "hello" was committed
        # the result says the turn was kept, and which one
        assert result.pending == pending

        # the next send finishes the kept turn from its record: the tool does not run again
        after = session.send("hello")
        assert after.text == "you said hello"
        assert len(payments.paid) == 2 and payments.paid[0] == payments.paid[1]
        texts = [m.text for m in session.load() if m.role != "assistant" or m.text]
        assert texts == ["pay Bob", "paid Bob", "done: paid Bob", "hello", "you said hello"]
        assert session.pending() is None
    finally:
        agent.close()


def test_an_aborted_resume_keeps_the_turn(store: Any) -> None:
    payments = Payments()
    agent = create_agent(provider=FunctionProvider(model), tools=[payments.tool], store=store)
    try:
        session = agent.session("s2")
        with pytest.raises(PropagatingToolError):
            session.send("pay Bob")
        payments.block = True
        controller = AbortController()

        def abort_when_running() -> None:
            if payments.running.wait(WAIT):
                controller.abort("user left")

        threading.Thread(target=abort_when_running, daemon=True).start()
        result = session.resume(signal=controller.signal)
        assert result is not None and result.finish_reason == "aborted"
        pending = session.pending()
        assert pending is not None and result.pending == pending
        finished = session.resume()
        assert finished is not None and finished.text == "done: paid Bob"
        assert len(payments.paid) == 2  # not three times
    finally:
        agent.close()


def test_an_aborted_new_turn_whose_tool_ran_stays_pending(store: Any) -> None:
    payments = Payments()
    payments.crash = False
    payments.block = True
    agent = create_agent(provider=FunctionProvider(model), tools=[payments.tool], store=store)
    try:
        session = agent.session("s3")
        result = session.send("pay Bob", timeout=0.5)
        assert result.finish_reason == "aborted" and len(payments.paid) == 1
        pending = session.pending()
        assert pending is not None and result.pending == pending
        assert session.send("thanks").text == "you said thanks"
        assert len(payments.paid) == 1  # the recorded payment was not made again
        roles = [m.role for m in session.load()]
        assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    finally:
        agent.close()


def test_an_aborted_turn_without_tools_is_still_dropped(store: Any) -> None:
    release = threading.Event()

    def slow(request: ModelRequest) -> str:
        request.signal.wait(WAIT)
        release.set()
        return "late"

    agent = create_agent(provider=FunctionProvider(slow), store=store)
    try:
        session = agent.session("s4")
        result = session.send("hi", timeout=0.2)
        assert result.finish_reason == "aborted"
        assert session.pending() is None and session.load() == ()
        assert getattr(result, "pending", None) is None
    finally:
        agent.close()
