"""Issue 10, turn side: no paused turn overwritten, no poisoned session, no self-deadlock.

Tests that depend on the store run over every kind (the ``store`` fixture:
memory, files, SQLite on disk and in memory).
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from helpers import WAIT
from storekit import Kit

from lousho_sessions import (
    AbortController,
    ExecutionResult,
    FunctionProvider,
    Limits,
    MemoryCheckpointStore,
    MemorySessionStore,
    Message,
    ModelRequest,
    PropagatingToolError,
    ProviderError,
    Session,
    SessionAwaitingApprovalError,
    SessionBusyError,
    TextPart,
    ToolCall,
    create_agent,
    memory_store,
    tool,
)
from lousho_sessions.aio import AsyncSession
from lousho_sessions.events import SessionEvent
from lousho_sessions.failures import is_permanent


def parts(kit: Kit) -> dict[str, Any]:
    return {"sessions": kit.sessions, "checkpoints": kit.checkpoints, "approvals": kit.approvals}


# -- 1: a paused turn continued by send() pauses again --------------------------------


def test_second_approval_during_send_raises_and_nothing_is_lost(store: Kit) -> None:
    ran: list[str] = []

    @tool(needs_approval=True)
    def step(name: str) -> str:
        """A step with a side effect."""
        ran.append(name)
        return f"did {name}"

    def model(request: ModelRequest) -> Message | str:
        done = [m.text for m in request.messages if m.role == "tool"]
        if len(done) == 0:
            return Message.assistant("", tool_calls=[ToolCall("c1", "step", {"name": "one"})])
        if len(done) == 1:
            return Message.assistant("", tool_calls=[ToolCall("c2", "step", {"name": "two"})])
        return "both done"

    agent = create_agent(provider=FunctionProvider(model), tools=[step], store=parts(store))
    session = agent.session("s1")
    first = session.send("do both")
    assert first.finish_reason == "awaiting-approval" and first.approval_id
    # resolved, but the resolving process died before it finished the turn
    store.approvals.resolve(first.approval_id, approved=True)

    with pytest.raises(SessionAwaitingApprovalError) as info:
        session.send("next question")
    second_id = info.value.approval_id
    assert second_id is not None and second_id != first.approval_id
    assert ran == ["one"]  # the first call ran once; the second waits
    pending = session.pending()
    assert pending is not None and pending.approval_id == second_id

    final = agent.approvals.resolve(id=second_id, approved=True)
    assert final is not None and final.text == "both done"
    assert ran == ["one", "two"]
    texts = [(m.role, m.text) for m in session.load()]
    assert texts == [
        ("user", "do both"),
        ("assistant", ""),
        ("tool", "did one"),
        ("assistant", ""),
        ("tool", "did two"),
        ("assistant", "both done"),
    ]
    assert session.pending() is None
    assert session.send("next question").text == "both done"


# -- 2: a deterministic failure must not poison a durable session ---------------------


def deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"x": value}
    return value


def encode_failure() -> ProviderError:
    try:
        "\ud800".encode("utf-8")
    except UnicodeEncodeError as exc:
        error = ProviderError(None, "cannot encode the request")
        error.__cause__ = exc
        return error
    raise AssertionError("unreachable")


FAILURES: dict[str, Callable[[], Message]] = {
    "http-400": lambda: (_ for _ in ()).throw(
        ProviderError(400, "context length exceeded", retryable=False)
    ),
    "encode": lambda: (_ for _ in ()).throw(encode_failure()),
    "nan-args": lambda: Message.assistant(
        "", tool_calls=[ToolCall("c1", "echo", {"v": float("nan")})]
    ),
    "deep-args": lambda: Message.assistant("", tool_calls=[ToolCall("c1", "echo", deep(5000))]),
}


@tool
def echo(v: Any = None) -> str:
    """Echo."""
    return str(v)


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_permanent_failure_ends_the_turn_and_the_session_goes_on(store: Kit, failure: str) -> None:
    def model(request: ModelRequest) -> Message | str:
        users = [m.text for m in request.messages if m.role == "user"]
        if users[-1] == "boom":  # a poisoned session would re-run this turn on every send
            return FAILURES[failure]()
        return "fine: " + users[-1]

    agent = create_agent(provider=FunctionProvider(model), tools=[echo], store=parts(store))
    session = agent.session("p1")
    session.send("first")
    before = session.load()
    with pytest.raises((ProviderError, ValueError, RecursionError)):
        session.send("boom")
    assert session.load() == before  # the transcript is unchanged
    assert session.pending() is None  # the checkpoint is dropped
    assert store.checkpoints.list("p1.") == []
    assert session.send("next").text == "fine: next"
    assert [m.text for m in session.load()][-2:] == ["next", "fine: next"]


@pytest.mark.parametrize(
    "error",
    [
        ProviderError(503, "overloaded"),
        ProviderError(429, "slow down"),
        ProviderError(None, "reset", retryable=True),
        ProviderError(408, "timeout"),
    ],
    ids=["503", "429", "retryable", "408"],
)
def test_transient_failure_keeps_the_turn_for_resume(error: ProviderError) -> None:
    failing = threading.Event()
    failing.set()

    def model(request: ModelRequest) -> str:
        if failing.is_set():
            raise error
        return "done"

    session = create_agent(provider=FunctionProvider(model), store=memory_store()).session("t1")
    with pytest.raises(ProviderError):
        session.send("hi")
    assert session.pending() is not None
    failing.clear()
    result = session.resume()
    assert result is not None and result.text == "done"


def test_is_permanent_rule() -> None:
    assert is_permanent(ProviderError(400, "bad"))
    assert is_permanent(ProviderError(404, "no model"))
    assert not is_permanent(ProviderError(409, "conflict"))
    assert not is_permanent(ProviderError(500, "oops"))
    assert not is_permanent(ProviderError(400, "odd", retryable=True))
    assert is_permanent(encode_failure())
    assert not is_permanent(OSError("disk full"))
    assert not is_permanent(PropagatingToolError("stop"))
    assert not is_permanent(RuntimeError("unknown: kept, so nothing that ran is lost"))
    assert is_permanent(RecursionError())
    wrapped = ProviderError(None, "model call failed")
    wrapped.__context__ = ValueError("bad JSON")
    assert is_permanent(wrapped)
    assert not is_permanent(KeyboardInterrupt())


# -- 2: bad input is refused at the door, before anything is stored -------------------


@pytest.mark.parametrize(
    ("input", "error", "match"),
    [
        ("ab\ud800c", ValueError, r"lone surrogate .* at position 2"),
        ([TextPart(42)], TypeError, r"text must be a str, got int"),  # type: ignore[arg-type]
        (Message.user("x", metadata={"score": float("inf")}), ValueError, r"\['score'\] is inf"),
        (Message.user("x", metadata=deep(150)), ValueError, r"more than 100 levels"),
        (Message.user("x", metadata={"k": {1, 2}}), TypeError, r"set is not a JSON value"),
        (
            [
                Message.user("x"),
                Message.assistant("", tool_calls=[ToolCall("c", "echo", {"v": float("nan")})]),
            ],
            ValueError,
            r"arguments of tool call 'c'.*\['v'\] is nan",
        ),
    ],
    ids=["surrogate", "non-str", "inf-metadata", "deep-metadata", "set", "nan-arguments"],
)
def test_bad_input_is_refused_before_anything_is_stored(
    store: Kit, input: Any, error: type[Exception], match: str
) -> None:
    agent = create_agent(provider=FunctionProvider(lambda r: "ok"), store=parts(store))
    session = agent.session("in1")
    with pytest.raises(error, match=match):
        session.send(input)
    with pytest.raises(error, match=match):
        session.stream(input)
    assert session.load() == ()
    assert store.checkpoints.list() == []
    assert session.send("fine").text == "ok"


# -- 4: a session called from its own turn, and timeouts that always return -----------


@pytest.mark.parametrize("calls_in_step", [1, 2], ids=["inline-tool", "pooled-tools"])
def test_tool_calling_its_own_session_gets_an_error_at_once(calls_in_step: int) -> None:
    seen: list[str] = []
    holder: list[Session] = []

    @tool
    def again(what: str) -> str:
        """Calls back into the session that runs it."""
        session = holder[0]
        attempts: dict[str, Callable[[], object]] = {
            "send": lambda: session.send("inner", timeout=2),
            "stream": lambda: session.stream("inner"),
            "load": session.load,
            "clear": session.clear,
            "compact": session.compact,
            "resume": session.resume,
            "pending": session.pending,
            "discard_pending": session.discard_pending,
        }
        try:
            attempts[what]()
        except SessionBusyError as exc:
            seen.append(f"{what}: {exc}")
            raise
        return "no error"

    names = ["send", "stream", "load", "clear", "compact", "resume", "pending", "discard_pending"]

    def model(request: ModelRequest) -> Message | str:
        if request.messages[-1].role == "user":
            batch = names if calls_in_step > 1 else names[:1]
            return Message.assistant(
                "",
                tool_calls=[ToolCall(f"c{i}", "again", {"what": n}) for i, n in enumerate(batch)],
            )
        return "done"

    session = create_agent(provider=FunctionProvider(model), tools=[again]).session("re1")
    holder.append(session)
    result = session.send("go", timeout=WAIT)
    assert result.text == "done"
    expected = names if calls_in_step > 1 else names[:1]
    assert sorted(s.split(":")[0] for s in seen) == sorted(expected)
    assert all("inside this session's own work" in s for s in seen)
    tool_messages = [m for m in result.messages if m.role == "tool"]
    assert all(m.is_error and "SessionBusyError" in m.text for m in tool_messages)
    assert session.send("after", timeout=WAIT).text == "done"  # the session still works


def test_listener_calling_its_own_session_gets_an_error() -> None:
    session = create_agent(provider=FunctionProvider(lambda r: "ok")).session("re2")
    errors: list[BaseException] = []

    def listener(event: SessionEvent) -> None:
        try:
            session.load()
        except SessionBusyError as exc:
            errors.append(exc)

    session.on(listener)
    session.send("hi")
    session.clear()  # notifies the listener on the worker thread
    assert len(errors) == 1 and "load()" in str(errors[0])
    assert session.send("again", timeout=WAIT).text == "ok"


def stuck_model(release: threading.Event, entered: threading.Event) -> FunctionProvider:
    """Blocks on ``release`` when told "stuck", ignoring its abort signal."""

    def model(request: ModelRequest) -> str:
        if request.messages[-1].text == "stuck":
            entered.set()
            release.wait(WAIT)
        return "answer"

    return FunctionProvider(model)


def returns_within(fn: Callable[[], object], seconds: float) -> object:
    """Run ``fn`` on a thread; fail (instead of hanging the suite) if it does not return."""
    box: list[object] = []
    thread = threading.Thread(target=lambda: box.append(_outcome(fn)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the call did not return"
    return box[0]


def _outcome(fn: Callable[[], object]) -> object:
    try:
        return fn()
    except Exception as exc:
        return exc


@pytest.mark.parametrize("api", ["session", "agent"])
def test_send_timeout_returns_behind_a_turn_that_never_ends(api: str) -> None:
    release, entered = threading.Event(), threading.Event()
    agent = create_agent(provider=stuck_model(release, entered), store=memory_store())
    session = agent.session("to1")
    send: Callable[..., ExecutionResult]
    send = session.send if api == "session" else functools.partial(agent.send, session_id="to1")
    first = threading.Thread(target=lambda: _outcome(lambda: send("stuck")), daemon=True)
    first.start()
    try:
        assert entered.wait(WAIT)
        result = returns_within(lambda: send("queued", timeout=0.05), WAIT)
        assert isinstance(result, ExecutionResult) and result.finish_reason == "aborted"
        # the running turn ignores its abort signal: the timeout still returns, with an error
        outcome = returns_within(lambda: send("stuck", timeout=0.05), WAIT)
        assert isinstance(outcome, (TimeoutError, ExecutionResult))
    finally:
        release.set()
        first.join(WAIT)
    if api == "session":
        texts = [m.text for m in session.load()]
        assert "queued" not in texts  # the withdrawn turn never ran


# -- 6: the outcome a caller sees matches what the store holds ------------------------


class GatedCommits(MemorySessionStore):
    """A real memory session store whose transcript writes wait until released."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def append(
        self,
        id: str,
        messages: Sequence[Message],
        expected_length: int,
        *,
        fence: int | None = None,
    ) -> None:
        self.entered.set()
        assert self.release.wait(WAIT)
        super().append(id, messages, expected_length, fence=fence)


@pytest.mark.parametrize("how", ["sync-signal", "sync-timeout", "aio-cancel", "aio-timeout"])
def test_stop_racing_the_save_reports_the_saved_turn(how: str) -> None:
    store = GatedCommits()
    agent = create_agent(provider=FunctionProvider(lambda r: "saved answer"), store=store)
    session = agent.session("race1")

    def stop_when_saving(stop: Callable[[], object]) -> threading.Thread:
        def run() -> None:
            assert store.entered.wait(WAIT)  # past the turn's last abort check, in the save
            stop()
            store.release.set()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    outcome: object
    helper: threading.Thread | None
    if how == "sync-signal":
        controller = AbortController()
        helper = stop_when_saving(lambda: controller.abort("user"))
        outcome = session.send("hi", signal=controller.signal)
    elif how == "sync-timeout":
        helper = stop_when_saving(lambda: None)
        outcome = session.send("hi", timeout=0.01)  # fires while the save waits
    else:

        async def main() -> object:
            async_session = AsyncSession(session)
            if how == "aio-timeout":
                return await async_session.send("hi", timeout=0.01)
            task = asyncio.ensure_future(async_session.send("hi"))
            loop = asyncio.get_running_loop()
            stop_when_saving(lambda: loop.call_soon_threadsafe(task.cancel))
            try:
                return await task
            except asyncio.CancelledError:
                return "cancelled"

        helper = stop_when_saving(lambda: None) if how == "aio-timeout" else None
        outcome = asyncio.run(main())
    if helper is not None:
        helper.join(WAIT)
    assert [m.text for m in session.load()] == ["hi", "saved answer"]  # the store holds it
    assert isinstance(outcome, ExecutionResult), outcome  # ...and so the caller was told
    assert outcome.finish_reason == "stop" and outcome.text == "saved answer"


def test_aio_cancel_of_a_turn_that_was_not_saved_raises_cancelled() -> None:
    release, entered = threading.Event(), threading.Event()
    session = AsyncSession(
        create_agent(provider=stuck_model(release, entered), store=memory_store()).session("c1")
    )

    async def main() -> list[str]:
        first = asyncio.ensure_future(session.send("stuck"))
        assert await asyncio.to_thread(entered.wait, WAIT)
        second = asyncio.ensure_future(session.send("queued"))
        await asyncio.sleep(0)
        second.cancel()  # queued behind a turn that does not end: withdrawn at once
        outcomes = []
        try:
            await asyncio.wait_for(second, WAIT)
        except asyncio.CancelledError:
            outcomes.append("cancelled")
        release.set()
        outcomes.append((await first).text)
        return outcomes

    assert asyncio.run(main()) == ["cancelled", "answer"]
    assert [m.text for m in session.sync.load()] == ["stuck", "answer"]


# -- 7: many tool calls in one response ---------------------------------------------


def many_calls(n: int) -> FunctionProvider:
    def model(request: ModelRequest) -> Message | str:
        if request.messages[-1].role == "user":
            return Message.assistant(
                "", tool_calls=[ToolCall(f"c{i}", "echo", {"v": i}) for i in range(n)]
            )
        return "done"

    return FunctionProvider(model)


@pytest.mark.parametrize("where", ["agent", "session"])
def test_max_tool_calls_runs_only_the_calls_that_fit(where: str) -> None:
    ran: list[int] = []

    @tool
    def echo(v: int) -> str:
        """Echo."""
        ran.append(v)
        return str(v)

    limits = Limits(max_tool_calls=5)
    agent = create_agent(
        provider=many_calls(1000),
        tools=[echo],
        limits=limits if where == "agent" else None,
        store=memory_store(),
    )
    session = agent.session("lim", limits=limits if where == "session" else None)
    result = session.send("go")
    assert len(ran) == 5
    assert result.finish_reason == "limit" and result.limit == "max_tool_calls"
    answers = [m for m in result.messages if m.role == "tool"]
    assert len(answers) == 1000  # every call has its tool message
    assert sum("limit reached" in m.text for m in answers) == 995
    assert [m.role for m in session.load()][-1] == "tool"


class CountingCheckpoints(MemoryCheckpointStore):
    """A real memory checkpoint store that counts the JSON bytes of every save."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[tuple[str, int]] = []

    def save(self, turn_id: str, checkpoint: Any, *, fence: int | None = None) -> None:
        self.sizes.append((turn_id, len(json.dumps(checkpoint))))
        super().save(turn_id, checkpoint, fence=fence)


def checkpoint_bytes(n: int) -> CountingCheckpoints:
    checkpoints = CountingCheckpoints()
    agent = create_agent(provider=many_calls(n), tools=[echo], store={"checkpoints": checkpoints})
    assert agent.session("many").send("go").text == "done"
    return checkpoints


def test_checkpoint_cost_per_tool_call_does_not_grow_with_the_calls_before_it() -> None:
    small, large = checkpoint_bytes(100), checkpoint_bytes(800)
    assert len(large.sizes) > 800  # every result is saved as it finishes
    # the largest save made for one tool result is the same for 100 and 800 calls...
    after_model = 2  # saves before the first result: the input, the model response
    per_result_small = max(size for _, size in small.sizes[after_model:101])
    per_result_large = max(size for _, size in large.sizes[after_model:801])
    assert per_result_large <= per_result_small * 1.2
    # ...so the bytes written grow linearly with the calls (x8), not quadratically (x64)
    total_small = sum(size for _, size in small.sizes)
    total_large = sum(size for _, size in large.sizes)
    assert total_large / total_small < 12


def test_results_in_records_are_not_run_again_on_resume(store: Kit) -> None:
    runs: dict[int, int] = {}
    lock = threading.Lock()
    crash = threading.Event()
    crash.set()

    @tool
    def echo(v: int) -> str:
        """Echo; call 70 stops the process the first time."""
        with lock:
            runs[v] = runs.get(v, 0) + 1
        if v == 70 and crash.is_set():
            crash.clear()
            raise PropagatingToolError("the process died here")
        return str(v)

    agent = create_agent(provider=many_calls(100), tools=[echo], store=parts(store))
    session = agent.session("rec")
    with pytest.raises(PropagatingToolError):
        session.send("go")
    assert len(store.checkpoints.list("rec.turn-0-r")) >= 3  # 99 results, 32 per record
    result = agent.resume("rec")
    assert result is not None and result.text == "done"
    assert runs == {v: (2 if v == 70 else 1) for v in range(100)}
    assert store.checkpoints.list("rec.") == []
    assert len([m for m in session.load() if m.role == "tool"]) == 100
