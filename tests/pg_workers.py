"""Bodies of the processes the PostgreSQL multi-process tests start (forked from tests/fork_server.py).

Each opens its own ``PostgresStore`` on the schema the test names and reports to
the test through a queue: ``("ok", detail)`` or ``("error", traceback)``.
"""

from __future__ import annotations

import threading
import traceback
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier, Event
from typing import Any

import storekit
from services_pg import postgres_url

from lousho_sessions import (
    ApprovalAlreadyResolvedError,
    FunctionProvider,
    Message,
    ModelRequest,
    ToolCall,
    ToolContext,
    create_agent,
    tool,
)
from lousho_sessions.postgres import PostgresStore
from lousho_sessions.stores.base import AgentStore

WAIT = 60.0


def open_store(schema: str, *, ttl: float = 30.0) -> PostgresStore:
    return PostgresStore(postgres_url(), schema=schema, min_size=1, max_size=2, lease_ttl=ttl)


def echo(request: ModelRequest) -> Message:
    """A model that answers a user message with its own text."""
    return Message.assistant(request.messages[-1].text)


def send_turns(schema: str, worker: int, turns: int, barrier: Barrier, out: Queue[Any]) -> None:
    """``turns`` sends on session "shared" through the real agent, the lease held per turn."""
    try:
        with open_store(schema) as store:
            agent = create_agent(provider=FunctionProvider(echo), store=store)
            session = agent.session("shared")
            barrier.wait(WAIT)
            for n in range(turns):
                session.send(f"w{worker}-t{n}")
            agent.close()
        out.put(("ok", worker))
    except BaseException:
        out.put(("error", traceback.format_exc()))


def open_at_once(schema: str, barrier: Barrier, out: Queue[Any]) -> None:
    """Open a store on a schema nobody created yet, all processes at the same moment."""
    try:
        barrier.wait(WAIT)
        with open_store(schema) as store:
            out.put(("ok", store.applied_migrations))
    except BaseException:
        out.put(("error", traceback.format_exc()))


def race_approvals(
    schema: str, rounds: int, barrier: Barrier, out: Queue[Any], worker: int
) -> None:
    """Per round, after the barrier: try to resolve approval ``r<n>``; report the rounds won."""
    try:
        with open_store(schema) as store:
            won = []
            for n in range(rounds):
                barrier.wait(WAIT)  # the test created r<n>
                try:
                    store.approvals.resolve(f"r{n}", approved=True, reason=f"worker {worker}")
                    won.append(n)
                except ApprovalAlreadyResolvedError:
                    pass
                barrier.wait(WAIT)  # every worker tried
        out.put(("ok", won))
    except BaseException:
        out.put(("error", traceback.format_exc()))


def durable_agent(store: PostgresStore, log: Queue[Any], *, stop: bool) -> Any:
    """An agent whose turn calls ``tool_a`` then ``tool_b``; each tool run is reported to ``log``.

    ``stop=True`` makes ``tool_b`` report ``("inside", "tool_b")`` and then wait
    (the test kills this process meanwhile).
    """

    def model(request: ModelRequest) -> Message:
        done = sum(1 for m in request.messages if m.role == "tool")
        if done == 0:
            return Message.assistant("", tool_calls=[ToolCall("call-a", "tool_a", {})])
        if done == 1:
            return Message.assistant("", tool_calls=[ToolCall("call-b", "tool_b", {})])
        return Message.assistant("all done")

    @tool
    def tool_a(ctx: ToolContext) -> str:
        """First tool."""
        log.put(("ran", "tool_a"))
        return "A"

    @tool
    def tool_b(ctx: ToolContext) -> str:
        """Second tool."""
        log.put(("ran", "tool_b"))
        if stop:
            log.put(("inside", "tool_b"))
            threading.Event().wait(WAIT)  # nothing sets it: the test kills this process
        return "B"

    return create_agent(provider=FunctionProvider(model), tools=[tool_a, tool_b], store=store)


def turn_until_killed(schema: str, ttl: float, log: Queue[Any]) -> None:
    """Start a durable turn on session "crash" that stops inside ``tool_b`` (then gets killed)."""
    try:
        store = open_store(schema, ttl=ttl)
        agent = durable_agent(store, log, stop=True)
        agent.session("crash").send("go")
    except BaseException:
        log.put(("error", traceback.format_exc()))


def second_turn_until_killed(schema: str, ttl: float, log: Queue[Any]) -> None:
    """``storekit.second_turn_until_killed`` on a ``PostgresStore``."""
    storekit.second_turn_until_killed(lambda: open_store(schema, ttl=ttl), log, WAIT)


def resume_turn(schema: str, ttl: float, log: Queue[Any]) -> None:
    """Finish session "crash"'s interrupted turn; report the transcript's texts."""
    try:
        with open_store(schema, ttl=ttl) as store:
            agent = durable_agent(store, log, stop=False)
            result = agent.session("crash").resume()
            texts = [m.text for m in store.sessions.load("crash") or []]
            agent.close()
        log.put(("ok", (None if result is None else result.text, texts)))
    except BaseException:
        log.put(("error", traceback.format_exc()))


def stale_turn(schema: str, ttl: float, log: Queue[Any], go: Event) -> None:
    """A turn on session "stale" whose model call waits for ``go``; report how it ended."""
    try:
        with open_store(schema, ttl=ttl) as store:
            agent = create_agent(
                provider=FunctionProvider(_waiting_model(log, go)),
                store=AgentStore(sessions=store.sessions),
            )
            try:
                agent.session("stale").send("from the stale worker")
                log.put(("ok", "written"))
            except Exception as exc:
                log.put(("refused", type(exc).__name__))
            agent.close()
    except BaseException:
        log.put(("error", traceback.format_exc()))


def _waiting_model(log: Queue[Any], go: Event) -> Any:
    def model(request: ModelRequest) -> Message:
        log.put(("inside", "model"))
        assert go.wait(WAIT)
        return Message.assistant("stale answer")

    return model
