"""Recovery in one process (issue 16): the sweep's rules, the effect ledger, bad input.

Real processes killed mid-turn are in test_recovery_processes.py. A checkpoint a
crash left is made here the way a crash leaves it: saved by a turn that never ended.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from lousho_sessions import (
    FunctionProvider,
    InvalidSessionIdError,
    MemoryCheckpointStore,
    Message,
    ModelRequest,
    ProviderError,
    ScriptedProvider,
    StoreError,
    ToolCall,
    ToolContext,
    ToolDefinitionError,
    create_agent,
    memory_store,
    tool,
)
from lousho_sessions.approvals import new_record
from lousho_sessions.engine._effects import rerun_approval_id
from lousho_sessions.recovery import abandoned_turns, resume_turn, stale_turns, sweep
from lousho_sessions.sqlite import SqliteStore
from lousho_sessions.stores.base import AgentStore

FIXTURES = Path(__file__).parent / "fixtures"


def crashed_in_lookup(store: AgentStore, *, started: bool) -> None:
    """Leave the checkpoint a process dies with inside the call ``call-1`` to ``lookup``
    (the golden checkpoint: the model asked for it; no result), its intent recorded or not,
    saved under a lease (``fence``) the process held."""
    data = json.loads((FIXTURES / "checkpoint-v2.json").read_text())
    data.update(attempts=0, fence=1, started=["call-1"] if started else [])
    data["updated_at"] = datetime.now(timezone.utc).isoformat()
    assert store.checkpoints is not None
    store.checkpoints.save("golden.turn-0", data)


def test_an_interrupted_non_idempotent_call_parks_then_approve_runs_it_once_again() -> None:
    store = memory_store()
    crashed_in_lookup(store, started=True)
    ran: list[str] = []

    @tool(idempotent=False)
    def lookup(city: str) -> str:
        """Look up."""
        ran.append(city)
        return "sunny"

    agent = create_agent(provider=ScriptedProvider(["It is sunny."]), tools=[lookup], store=store)
    [swept] = sweep(store, agent=agent)
    assert (swept.turn_id, swept.outcome, swept.attempts) == ("golden.turn-0", "parked", 1)
    assert ran == []  # it may have run: never silently again
    [approval] = agent.approvals.list()
    assert approval.note == "this call may have run; approve to run it again"
    assert stale_turns(store) == [] and sweep(store, agent=agent) == []  # parked: not swept
    result = agent.approvals.resolve(approval.id, approved=True)
    assert result is not None and result.text == "It is sunny." and ran == ["Paris"]
    assert [m.role for m in agent.session("golden").load()][-2:] == ["tool", "assistant"]


def test_denying_the_rerun_gives_the_model_an_error_result() -> None:
    store = memory_store()
    crashed_in_lookup(store, started=True)
    seen: list[Message] = []

    def model(request: ModelRequest) -> str:
        seen.append(request.messages[-1])
        return "I could not check."

    @tool(idempotent=False)
    def lookup(city: str) -> str:
        """Look up."""
        raise AssertionError("a denied call must not run")

    agent = create_agent(provider=FunctionProvider(model), tools=[lookup], store=store)
    assert [s.outcome for s in sweep(store, agent=agent)] == ["parked"]
    [approval] = agent.approvals.list()
    result = agent.approvals.resolve(approval.id, approved=False, reason="already charged")
    assert result is not None and result.text == "I could not check."
    assert seen[-1].is_error and "already charged" in seen[-1].text


@pytest.mark.parametrize(("answer", "runs"), [("sunny (from the ledger)", 0), (None, 1)])
def test_reconcile_answers_for_an_interrupted_call_or_lets_it_run(
    answer: str | None, runs: int
) -> None:
    store = memory_store()
    crashed_in_lookup(store, started=True)
    ran: list[str] = []
    asked: list[str] = []

    def reconcile(ctx: ToolContext) -> str | None:
        asked.append(ctx.idempotency_key)
        return answer

    @tool(idempotent=False, reconcile=reconcile)
    def lookup(city: str) -> str:
        """Look up."""
        ran.append(city)
        return "sunny (run)"

    seen: list[str] = []

    def model(request: ModelRequest) -> str:
        seen.append(request.messages[-1].text)
        return "done"

    agent = create_agent(provider=FunctionProvider(model), tools=[lookup], store=store)
    assert [s.outcome for s in sweep(store, agent=agent)] == ["finished"]
    assert asked == ["run-golden:call-1"] and len(ran) == runs
    assert seen == [answer or "sunny (run)"]


def test_a_non_idempotent_call_that_never_started_runs_without_asking() -> None:
    store = memory_store()
    crashed_in_lookup(store, started=False)  # died after the model response, before the call
    ran: list[str] = []

    @tool(idempotent=False)
    def lookup(city: str) -> str:
        """Look up."""
        ran.append(city)
        return "sunny"

    agent = create_agent(provider=ScriptedProvider(["ok"]), tools=[lookup], store=store)
    assert [s.outcome for s in sweep(store, agent=agent)] == ["finished"] and ran == ["Paris"]


class CountingCheckpoints(MemoryCheckpointStore):
    """A real memory checkpoint store counting its writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def save(self, turn_id: str, checkpoint: Any, *, fence: int | None = None) -> None:
        self.writes += 1
        super().save(turn_id, checkpoint, fence=fence)


@pytest.mark.parametrize("idempotent", [True, False])
def test_only_a_non_idempotent_call_costs_one_more_write(idempotent: bool) -> None:
    checkpoints = CountingCheckpoints()

    @tool(idempotent=idempotent)
    def lookup(city: str) -> str:
        """Look up."""
        return "sunny"

    provider = ScriptedProvider(
        [Message.assistant("", tool_calls=[ToolCall("c1", "lookup", {"city": "Paris"})]), "ok"]
    )
    agent = create_agent(provider=provider, tools=[lookup], store={"checkpoints": checkpoints})
    assert agent.session("w").send("go").text == "ok"
    # the input, the response asking for the tool, its result (and, not idempotent, its intent)
    assert checkpoints.writes == (3 if idempotent else 4)
    assert checkpoints.list() == []


def failing_model(request: ModelRequest) -> str:
    raise ProviderError(503, "overloaded", retryable=True)


def test_a_turn_failing_on_every_sweep_is_abandoned_kept_and_listed(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "db.sqlite") as store:
        agent = create_agent(provider=FunctionProvider(failing_model), store=store)
        with pytest.raises(ProviderError):
            agent.session("u").send("hi")
        sweeps = [sweep(store, agent=agent, max_attempts=2) for _ in range(3)]
        assert [[(s.outcome, s.attempts) for s in swept] for swept in sweeps] == [
            [("failed", 1)],
            [("failed", 2)],
            [("abandoned", 2)],
        ]
        assert isinstance(sweeps[0][0].error, ProviderError)
        assert stale_turns(store) == [] and sweep(store, agent=agent) == []
        [abandoned] = abandoned_turns(store)
        assert (abandoned.turn_id, abandoned.status, abandoned.attempts) == (
            "u.turn-0",
            "abandoned",
            2,
        )
        assert store.checkpoints.load("u.turn-0") is not None  # kept, never deleted
        # a human tries again: resume() runs it, with a model that works now
        good = create_agent(provider=ScriptedProvider(["hello"]), store=store)
        result = good.session("u").resume()
        assert result is not None and result.text == "hello" and abandoned_turns(store) == []


def test_a_held_turn_is_not_stale_and_a_moved_fence_is_taken(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "db.sqlite") as store:
        agent = create_agent(provider=FunctionProvider(failing_model), store=store)
        with pytest.raises(ProviderError):
            agent.session("u").send("hi")
        [stale] = stale_turns(store)
        with store.sessions.turn_lock("u"):  # a live turn holds it (here: this thread)
            assert stale_turns(store) == []
            good = create_agent(provider=ScriptedProvider(["hello"]), store=store)
            assert resume_turn(store, "u.turn-0", agent=good).outcome == "taken"
        assert resume_turn(store, "u.turn-0", agent=good, fence=stale.fence).outcome == "finished"
        assert resume_turn(store, "u.turn-0", agent=good).outcome == "taken"  # finished: none left


def test_a_message_with_an_old_fence_resumes_nothing(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "db.sqlite") as store:
        agent = create_agent(provider=FunctionProvider(failing_model), store=store)
        with pytest.raises(ProviderError):
            agent.session("u").send("hi")
        [stale] = stale_turns(store)
        assert [s.outcome for s in sweep(store, agent=agent)] == ["failed"]  # claimed: new fence
        good = create_agent(provider=ScriptedProvider(["hello"]), store=store)
        assert resume_turn(store, "u.turn-0", agent=good, fence=stale.fence).outcome == "taken"
        [again] = stale_turns(store)
        assert again.fence != stale.fence and again.attempts == 1
        assert resume_turn(store, "u.turn-0", agent=good, fence=again.fence).outcome == "finished"


def test_stale_turns_older_than_filters_by_the_checkpoint_age() -> None:
    store = memory_store()
    crashed_in_lookup(store, started=False)
    assert [t.turn_id for t in stale_turns(store)] == ["golden.turn-0"]
    assert stale_turns(store, older_than=3600) == []  # saved just now
    assert stale_turns(store, limit=0) == []


def test_bad_input_is_refused_with_a_clear_error() -> None:
    store = memory_store()
    agent = create_agent(provider=ScriptedProvider([]), store=store)
    with pytest.raises(ValueError, match="max_attempts"):
        sweep(store, agent=agent, max_attempts=0)
    with pytest.raises(InvalidSessionIdError, match="checkpoint id"):
        resume_turn(store, "no dot here", agent=agent)
    with pytest.raises(StoreError, match="must both keep checkpoints"):
        sweep(AgentStore(store.sessions), agent=agent)
    with pytest.raises(ValueError, match="older_than"):
        stale_turns(store, older_than=-1)
    with pytest.raises(ToolDefinitionError, match="reconcile"):
        tool(reconcile="nope")(lambda: "x")  # type: ignore[call-overload]


def test_a_durable_send_of_the_session_its_tool_runs_in_is_refused_not_deadlocked() -> None:
    """A durable single send holds its session's lease (so sweeps can tell it is alive):
    started from a tool of that session's own turn it would wait for itself."""
    store = memory_store()
    errors: list[str] = []

    @tool
    def nested(ctx: ToolContext) -> str:
        """Send again."""
        try:
            agent.send("inner", session_id="u")
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        return "ok"

    provider = ScriptedProvider(
        [Message.assistant("", tool_calls=[ToolCall("c1", "nested", {})]), "done"]
    )
    agent = create_agent(provider=provider, tools=[nested], store=store)
    assert agent.session("u").send("go").text == "done"
    assert len(errors) == 1 and errors[0].startswith("SessionBusyError") and "lease" in errors[0]


def test_a_call_run_again_and_interrupted_again_is_asked_about_again() -> None:
    """The approved re-run recorded a new intent (in a result record) and the process died
    again: the first approval does not cover the second start."""
    store = memory_store()
    crashed_in_lookup(store, started=True)
    assert store.checkpoints is not None and store.approvals is not None
    call = ToolCall("call-1", "lookup", {"city": "Paris"})
    first = rerun_approval_id("run-golden", call, ["call-1"])
    store.approvals.create(
        new_record(
            first, session_id="golden", turn_id="golden.turn-0", run_id="run-golden", call=call
        )
    )
    store.approvals.resolve(first, approved=True)
    store.checkpoints.save(  # the intent of the re-run, as TurnCheckpoints.save_started writes it
        "golden.turn-0-r1-1",
        {"format": "lousho.turn-results", "version": 1, "run_id": "run-golden", "step": 1,
         "results": {}, "started": ["call-1"]},
    )  # fmt: skip

    @tool(idempotent=False)
    def lookup(city: str) -> str:
        """Look up."""
        raise AssertionError("not without asking again")

    agent = create_agent(provider=ScriptedProvider([]), tools=[lookup], store=store)
    assert [s.outcome for s in sweep(store, agent=agent)] == ["parked"]
    [pending] = agent.approvals.list()
    assert pending.id != first and pending.id == rerun_approval_id(
        "run-golden", call, ["call-1", "call-1"]
    )


def test_a_checkpoint_saved_outside_a_lease_is_never_listed_as_stale() -> None:
    """``AgentExecutor`` holds no lease: its running turn looks like a dead one, so never swept."""
    store = memory_store()
    crashed_in_lookup(store, started=False)
    assert store.checkpoints is not None
    data = store.checkpoints.load("golden.turn-0")
    assert data is not None
    store.checkpoints.save("golden.turn-0", {**data, "fence": None})
    agent = create_agent(provider=ScriptedProvider([]), store=store)
    assert stale_turns(store) == [] and sweep(store, agent=agent) == []
