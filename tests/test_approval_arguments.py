"""Approving with edited arguments (issue 31 item 6).

``agent.approvals.resolve(id, approved=True, arguments={...})`` (and ``resolve_stream``,
the ``aio`` ones, ``lousho approvals resolve --arguments``): the arguments are checked
against the tool's schema as a model's are, before anything is stored; the decision and
the arguments are written in one compare-and-set; the tool runs with them; the transcript
(and the model's next request) shows the call as it ran, the model's arguments kept in
the call's ``extra["original_arguments"]`` and in the approval record. A resolver killed
(SIGKILL, a real process) inside the tool leaves a turn a sweep finishes with the edited
arguments, once.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fork_server
import pytest
from approved_child import make_agent
from recovery_procs import until
from test_admin import lousho, new_url

from lousho_sessions import (
    AgentStore,
    ApprovalDecisionError,
    ApprovalNotFoundError,
    FunctionProvider,
    LoushoError,
    Message,
    ModelRequest,
    ToolArgumentsError,
    ToolCall,
    aio,
    create_agent,
    memory_store,
    open_store,
    tool,
)
from lousho_sessions.agent import Agent
from lousho_sessions.approvals import decide
from lousho_sessions.recovery import stale_turns, sweep
from lousho_sessions.stores.memory import MemoryCheckpointStore, MemorySessionStore

TESTS = Path(__file__).parent
MODEL_ARGUMENTS = {"to": "bob", "amount": 500, "memo": {"tags": ["rent"]}}
EDITED = {"to": "bob", "amount": 50, "memo": {"tags": ["rent", "checked"]}}


class Payments:
    """An agent whose model asks for ``pay`` (needs approval), then repeats the result;
    ``paid`` holds every run of the tool, ``requests`` every model request."""

    def __init__(self, store: Any) -> None:
        self.paid: list[tuple[str, int, list[str]]] = []
        self.requests: list[ModelRequest] = []

        @tool(needs_approval=True)
        def pay(to: str, amount: int, memo: dict[str, list[str]] | None = None) -> str:
            """Pay someone."""
            tags = (memo or {}).get("tags", [])
            self.paid.append((to, amount, tags))
            return f"paid {amount} to {to}"

        def model(request: ModelRequest) -> Message:
            self.requests.append(request)
            last = request.messages[-1]
            if last.role == "user":
                call = ToolCall("pay-1", "pay", MODEL_ARGUMENTS)
                return Message.assistant("", tool_calls=[call])
            return Message.assistant(f"done: {last.text}")

        self.store = store
        self.agent = create_agent(provider=FunctionProvider(model), tools=[pay], store=store)

    def pause(self, session_id: str = "s1") -> str:
        paused = self.agent.session(session_id).send("pay the rent")
        assert paused.finish_reason == "awaiting-approval" and paused.approval_id
        return paused.approval_id

    def stored(self, approval_id: str, session_id: str = "s1") -> tuple[Any, ...]:
        """Everything a refused decision must leave as it was."""
        parts = self.store
        return (
            parts.approvals.get(approval_id),
            parts.checkpoints.load(f"{session_id}.turn-0"),
            parts.sessions.load(session_id),
        )

    def check_ran_edited(self, approval_id: str, session_id: str = "s1") -> None:
        """The tool ran once with ``EDITED``; the transcript, the model and the record say so."""
        assert self.paid == [("bob", 50, ["rent", "checked"])]
        messages = self.agent.session(session_id).load()
        assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
        (call,) = messages[1].tool_calls
        assert (call.id, call.name, dict(call.arguments)) == ("pay-1", "pay", EDITED)
        assert call.extra["original_arguments"] == MODEL_ARGUMENTS
        assert messages[2].text == "paid 50 to bob" and messages[2].tool_call_id == "pay-1"
        assert messages[3].text == "done: paid 50 to bob"
        # the model was asked again with the call as it ran, not as it asked for it
        seen = self.requests[-1].messages
        (seen_call,) = [c for m in seen for c in m.tool_calls]
        assert dict(seen_call.arguments) == EDITED
        request = self.agent.approvals.get(approval_id)
        assert request.status == "approved"
        assert request.arguments == EDITED
        assert dict(request.call.arguments) == MODEL_ARGUMENTS  # the model's, in the record


@pytest.fixture(params=("memory", "sqlite", "postgres", "redis"))
def payments(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Payments]:
    if request.param == "memory":
        yield Payments(memory_store())
        return
    url, drop = new_url(request.param, tmp_path)
    store: Any = open_store(url)
    try:
        made = Payments(store)
        yield made
        made.agent.close()
    finally:
        store.close()
        drop()


# -- approving with edited arguments ----------------------------------------------------


def test_resolve_runs_the_tool_with_the_edited_arguments(payments: Payments) -> None:
    approval_id = payments.pause()
    result = payments.agent.approvals.resolve(approval_id, approved=True, arguments=EDITED)
    assert result is not None and result.text == "done: paid 50 to bob"
    payments.check_ran_edited(approval_id)
    assert payments.store.checkpoints.list("s1.") == []


def test_resolve_stream_runs_the_tool_with_the_edited_arguments(payments: Payments) -> None:
    approval_id = payments.pause()
    run = payments.agent.approvals.resolve_stream(
        id=approval_id, approved=True, reason="halved", arguments=EDITED
    )
    results = [e.output for e in run if e.type == "tool.result"]
    assert results == ["paid 50 to bob"]
    assert run.result().text == "done: paid 50 to bob"
    payments.check_ran_edited(approval_id)
    assert payments.agent.approvals.get(approval_id).reason == "halved"


def test_aio_resolve_and_resolve_stream_take_arguments(payments: Payments) -> None:
    first = payments.pause("s1")
    second = payments.pause("s2")
    agent = aio.AsyncAgent(payments.agent)

    async def main() -> tuple[str, str]:
        result = await agent.approvals.resolve(first, approved=True, arguments=EDITED)
        assert result is not None
        run = await agent.approvals.resolve_stream(second, approved=True, arguments=EDITED)
        async for _ in run:
            pass
        return result.text, (await run.result()).text

    assert asyncio.run(main()) == ("done: paid 50 to bob", "done: paid 50 to bob")
    for session_id, approval_id in (("s1", first), ("s2", second)):
        messages = payments.agent.session(session_id).load()
        assert dict(messages[1].tool_calls[0].arguments) == EDITED
        assert payments.agent.approvals.get(approval_id).arguments == EDITED
    assert payments.paid == [("bob", 50, ["rent", "checked"])] * 2


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({**EDITED, "amount": "50"}, "argument 'amount': expected integer"),
        ({**EDITED, "memo": {"tags": ["rent", 7]}}, "memo"),
        ({"to": "bob"}, "missing required argument 'amount'"),
        ({**EDITED, "currency": "EUR"}, "unknown argument 'currency'"),
        ({**EDITED, "memo": {"tags": [float("nan")]}}, "memo"),
        (["bob", 50], "expected a JSON object"),
    ],
    ids=["wrong-type", "nested", "missing", "unknown", "nan", "not-an-object"],
)
def test_arguments_that_do_not_fit_are_refused_before_anything_is_stored(
    payments: Payments, arguments: Any, named: str
) -> None:
    approval_id = payments.pause()
    before = payments.stored(approval_id)
    with pytest.raises(ToolArgumentsError) as caught:
        payments.agent.approvals.resolve(approval_id, approved=True, arguments=arguments)
    assert approval_id in str(caught.value) and named in str(caught.value), caught.value
    assert payments.stored(approval_id) == before
    assert payments.paid == []
    with pytest.raises(ToolArgumentsError):
        payments.agent.approvals.resolve_stream(approval_id, approved=True, arguments=arguments)
    assert payments.stored(approval_id) == before
    # still pending: a good decision goes through
    payments.agent.approvals.resolve(approval_id, approved=True, arguments=EDITED)
    payments.check_ran_edited(approval_id)


def test_a_float_that_is_not_finite_is_refused_where_the_schema_takes_any_number() -> None:
    """NaN fits a ``float`` parameter but cannot be saved as JSON: refused, naming the path."""

    @tool(needs_approval=True)
    def scale(factor: float) -> str:
        """Scale."""
        return f"scaled by {factor}"

    def model(request: ModelRequest) -> Message:
        if request.messages[-1].role == "user":
            return Message.assistant("", tool_calls=[ToolCall("c1", "scale", {"factor": 2.0})])
        return Message.assistant(request.messages[-1].text)

    agent = create_agent(provider=FunctionProvider(model), tools=[scale], store=memory_store())
    paused = agent.session("s").send("scale")
    assert paused.approval_id is not None
    with pytest.raises(ToolArgumentsError, match=r"factor.*NaN"):
        agent.approvals.resolve(paused.approval_id, approved=True, arguments={"factor": math.nan})
    assert agent.approvals.get(paused.approval_id).status == "pending"
    result = agent.approvals.resolve(paused.approval_id, approved=True, arguments={"factor": 3})
    assert result is not None and result.text == "scaled by 3.0"


def test_arguments_with_a_denial_are_refused(payments: Payments) -> None:
    approval_id = payments.pause()
    before = payments.stored(approval_id)
    with pytest.raises(ApprovalDecisionError) as caught:
        payments.agent.approvals.resolve(approval_id, approved=False, arguments=EDITED)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, LoushoError)
    assert approval_id in str(caught.value) and caught.value.code == "LOUSHO_APPROVAL_DECISION"
    with pytest.raises(ApprovalDecisionError):
        payments.agent.approvals.resolve_stream(approval_id, approved=False, arguments=EDITED)
    assert payments.stored(approval_id) == before
    result = payments.agent.approvals.resolve(approval_id, approved=False, reason="no")
    assert result is not None and "denied" in result.text and payments.paid == []
    assert payments.agent.approvals.get(approval_id).arguments is None


def test_an_agent_without_the_tool_cannot_check_the_arguments(payments: Payments) -> None:
    approval_id = payments.pause()
    before = payments.stored(approval_id)
    other = create_agent(provider=FunctionProvider(lambda r: "x"), store=payments.store)
    with pytest.raises(ApprovalDecisionError, match="no tool 'pay'"):
        other.approvals.resolve(approval_id, approved=True, arguments=EDITED)
    assert payments.stored(approval_id) == before


def test_an_unknown_approval_with_arguments_is_not_found(payments: Payments) -> None:
    with pytest.raises(ApprovalNotFoundError):
        payments.agent.approvals.resolve("appr-nope", approved=True, arguments=EDITED)


class PlainApprovals:
    """A user's approval store written before edited arguments: ``resolve`` takes none."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}

    def create(self, record: Any) -> None:
        self.records[record["id"]] = json.loads(json.dumps(record))

    def get(self, id: str) -> dict[str, Any] | None:
        return self.records.get(id)

    def resolve(self, id: str, *, approved: bool, reason: str | None = None) -> dict[str, Any]:
        record = self.records[id]
        record.update(status="approved" if approved else "denied", reason=reason)
        return record

    def list(self, session_id: str | None = None, status: str | None = "pending") -> list[Any]:
        return [r for r in self.records.values() if status is None or r["status"] == status]

    def delete(self, id: str) -> None:
        self.records.pop(id, None)


def test_a_store_whose_resolve_takes_no_arguments_refuses_them_and_records_nothing() -> None:
    approvals = PlainApprovals()
    store = AgentStore(MemorySessionStore(), MemoryCheckpointStore(), approvals)
    payments = Payments(store)
    approval_id = payments.pause()
    with pytest.raises(ApprovalDecisionError, match="cannot keep edited arguments"):
        payments.agent.approvals.resolve(approval_id, approved=True, arguments=EDITED)
    assert approvals.records[approval_id]["status"] == "pending"
    result = payments.agent.approvals.resolve(approval_id, approved=True)  # no arguments: fine
    assert result is not None and result.text == "done: paid 500 to bob"


def test_an_approval_decided_twice_with_arguments_runs_the_first_decision(
    payments: Payments,
) -> None:
    from lousho_sessions import ApprovalAlreadyResolvedError

    approval_id = payments.pause()
    payments.agent.approvals.resolve(approval_id, approved=True, arguments=EDITED)
    with pytest.raises(ApprovalAlreadyResolvedError):
        payments.agent.approvals.resolve(approval_id, approved=True, arguments=MODEL_ARGUMENTS)
    payments.check_ran_edited(approval_id)


# -- after a crash -----------------------------------------------------------------------

CRASH_KINDS = ("files", "sqlite", "postgres", "redis")


@pytest.fixture(params=CRASH_KINDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    found, drop = new_url(request.param, tmp_path)
    try:
        yield found
    finally:
        drop()


def starts(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


def swept_with_carol(store: Any, agent: Agent, turn_id: str, log: Path) -> None:
    """``turn_id`` is stale and one sweep finishes it, running ``pay`` once, for carol."""
    session_id = turn_id.partition(".")[0]
    until(
        lambda: [t.turn_id for t in stale_turns(store)] == [turn_id],
        f"{turn_id} listed as stale",
        detail=lambda: repr(stale_turns(store)),
    )
    [swept] = sweep(store, agent=agent)
    assert (swept.turn_id, swept.outcome) == (turn_id, "finished"), swept
    assert swept.result is not None and swept.result.text == "done: paid carol"
    messages = store.sessions.load(session_id)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    (call,) = messages[1].tool_calls
    assert dict(call.arguments) == {"to": "carol"}
    assert call.extra["original_arguments"] == {"to": "bob"}
    assert messages[2].text == "paid carol"
    assert starts(log).count("paid") == 1  # the decision applied once
    assert stale_turns(store) == [] and sweep(store, agent=agent) == []
    assert store.checkpoints.list(f"{session_id}.") == []


def test_a_resolver_killed_in_the_tool_leaves_a_turn_sweep_finishes_with_the_edited_arguments(
    url: str, tmp_path: Path
) -> None:
    log = tmp_path / "pay.log"
    store: Any = open_store(url)
    try:
        agent = make_agent(store, str(log))
        paused = agent.session("u1").send("pay bob")
        assert paused.approval_id is not None
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        }
        victim = fork_server.Popen(
            [
                str(TESTS / "edited_child.py"),
                url,
                str(log),
                paused.approval_id,
                json.dumps({"to": "carol"}),
            ],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            until(
                lambda: Path(str(log) + ".hanging").exists() or victim.poll() is not None,
                "the resolver inside the approved tool",
            )
            assert victim.poll() is None, victim.communicate()[1]
            os.kill(victim.pid, signal.SIGKILL)
            assert victim.wait(timeout=60) == -signal.SIGKILL
        finally:
            if victim.poll() is None:
                victim.kill()
            victim.communicate(timeout=60)
        assert starts(log) == ["start"]
        assert agent.approvals.get(paused.approval_id).arguments == {"to": "carol"}
        # the checkpoint holds the call as it runs, saved before the tool started
        checkpoint = store.checkpoints.load("u1.turn-0")
        assert checkpoint["new"][1]["tool_calls"][0]["arguments"] == {"to": "carol"}
        swept_with_carol(store, agent, "u1.turn-0", log)
    finally:
        store.close()


def test_a_decision_recorded_with_arguments_and_never_continued_is_swept_with_them(
    url: str, tmp_path: Path
) -> None:
    """The decision alone (the approval record) carries the arguments: the process that
    decided stopped before the turn went on; the sweep runs the tool with them."""
    log = tmp_path / "pay.log"
    store: Any = open_store(url)
    try:
        agent = make_agent(store, str(log))
        paused = agent.session("u2").send("pay bob")
        assert paused.approval_id is not None
        record = decide(
            store.approvals,
            agent.tools,
            paused.approval_id,
            approved=True,
            arguments={"to": "carol"},
        )
        assert record["arguments"] == {"to": "carol"} and starts(log) == []
        swept_with_carol(store, agent, "u2.turn-0", log)
    finally:
        store.close()


# -- the command line --------------------------------------------------------------------


def test_lousho_approvals_resolve_with_arguments(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cli.db"
    log = tmp_path / "pay.log"
    store: Any = open_store(url)
    try:
        paused = make_agent(store, str(log)).session("c1").send("pay bob")
        approval_id = paused.approval_id
        assert approval_id is not None
        env = {"EDITED_LOG": str(log)}
        agent_args = ("--agent", "edited_child:cli_agent", "--store", url)
        before = store.approvals.get(approval_id)
        refused = [
            (("--approve", "--arguments", '{"to": "carol"'), "--arguments is not valid JSON"),
            (("--approve", "--arguments", '["carol"]'), "must be a JSON object, not list"),
            (("--deny", "--arguments", '{"to": "carol"}'), "give --approve"),
            (("--approve", "--arguments", '{"to": 7}'), "argument 'to': expected string"),
            (("--approve", "--arguments", '{"who": "x"}'), "unknown argument 'who'"),
        ]
        for options, message in refused:
            done = lousho("approvals", "resolve", approval_id, *options, *agent_args, env=env)
            assert done.returncode == 2, (options, done.stdout, done.stderr)
            assert message in done.stderr, (options, done.stderr)
            assert store.approvals.get(approval_id) == before, options
        no_agent = lousho(
            "approvals", "resolve", approval_id, "--approve", "--arguments", "{}", "--store", url
        )
        assert no_agent.returncode == 2 and "--arguments needs --agent" in no_agent.stderr
        assert store.approvals.get(approval_id) == before and starts(log) == []
        done = lousho(
            "approvals",
            "resolve",
            approval_id,
            "--approve",
            "--arguments",
            '{"to": "carol"}',
            "--json",
            *agent_args,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        body = json.loads(done.stdout)
        assert body["status"] == "approved" and body["arguments"] == {"to": "carol"}
        assert body["resumed"]["text"] == "done: paid carol"
        messages = store.sessions.load("c1")
        assert dict(messages[1].tool_calls[0].arguments) == {"to": "carol"}
        assert messages[2].text == "paid carol" and starts(log) == ["start", "paid"]
    finally:
        store.close()


def test_a_cancelled_approval_refuses_edited_arguments(payments: Payments) -> None:
    """A rewound session's approval reads as cancelled: approving it, edited or not, is refused."""
    from lousho_sessions.errors import ApprovalCancelledError

    approval_id = payments.pause()
    payments.agent.session("s1").rewind(0)
    before = payments.stored(approval_id)
    with pytest.raises(ApprovalCancelledError):
        payments.agent.approvals.resolve(approval_id, approved=True, arguments=EDITED)
    assert payments.stored(approval_id) == before and payments.paid == []
