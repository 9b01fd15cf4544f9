"""A process that blocks in a turn until the test sends it SIGINT (``tests/test_interrupt.py``).

``python interrupt_child.py CALL [queued]`` where CALL is how it waits: ``session-send``,
``agent-send``, ``session-resume``, ``resolve`` (the model call blocks), or ``saved``
(the turn is saved, then the store write waits for the interrupt). With ``queued`` the
child interrupts itself, the moment the call has queued its turn and the turn is in the
model call, before the call reaches its wait (as a Ctrl-C does when the OS runs the
worker before the caller, on a loaded machine). It prints one JSON
object a line on stdout: ``{"at": "blocked"}`` once it is blocked, then what the
interrupted call did (``{"at": "interrupted", ...}`` or ``{"at": "returned", ...}``),
then ``{"at": "next", ...}`` after a further ``send()`` on the same session.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from types import FrameType
from typing import Any

from lousho_sessions import (
    FunctionProvider,
    Message,
    ModelRequest,
    Session,
    ToolCall,
    create_agent,
    memory_store,
    tool,
)
from lousho_sessions.runtime._worker import Workers
from lousho_sessions.stores.memory import MemorySessionStore

#: set by the SIGINT handler before KeyboardInterrupt is raised
interrupted = threading.Event()
#: what the blocked model call saw
seen: dict[str, Any] = {}
#: set when the model call blocks (``queued``: the main thread interrupts itself then)
in_model = threading.Event()


def report(at: str, **fields: Any) -> None:
    print(json.dumps({"at": at, **fields}), flush=True)


def on_sigint(signum: int, frame: FrameType | None) -> None:
    interrupted.set()
    raise KeyboardInterrupt


class SavedThenBlocked(MemorySessionStore):
    """Holds the worker after the turn's messages are saved, until the interrupt comes."""

    block = False

    def append(self, *args: Any, **kwargs: Any) -> None:
        super().append(*args, **kwargs)
        if self.block:
            self.block = False
            report("blocked")
            interrupted.wait(30)


def interrupt_once_queued() -> None:
    """Ctrl-C on the main thread right after the call's turn is queued (``Workers.submit``
    returned) and has reached the model call: the gap between queueing a turn and waiting
    for it, where an interrupt used to leave the turn running with no one waiting for it."""
    submit = Workers.submit

    def submit_then_interrupt(self: Workers, key: Any, job: Any, owner: Any = None) -> None:
        submit(self, key, job, owner)
        main = threading.current_thread() is threading.main_thread()
        if main and not interrupted.is_set() and in_model.wait(20):
            signal.raise_signal(signal.SIGINT)  # handled here, before submit returns

    Workers.submit = submit_then_interrupt  # type: ignore[method-assign]


def model(request: ModelRequest) -> str | Message:
    last = request.messages[-1]
    if last.role == "user" and last.text == "delete":
        return Message.assistant("", tool_calls=[ToolCall("d1", "delete", {"path": "x"})])
    if (last.role == "user" and last.text == "block") or (last.role == "tool" and not seen):
        released = threading.Event()  # set only when the turn is aborted
        request.signal.add_callback(lambda s: released.set())
        report("blocked")
        in_model.set()
        released.wait(30)  # an un-aborted turn keeps its worker busy this long
        seen["aborted"] = request.signal.aborted
        return "late answer"
    return f"answer to {last.text}"


@tool(needs_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def texts(session: Session) -> list[str]:
    return [m.text for m in session.load()]


def main(call: str, when: str = "waiting") -> None:
    signal.signal(signal.SIGINT, on_sigint)
    store = memory_store()
    sessions = SavedThenBlocked()
    agent = create_agent(provider=FunctionProvider(model), tools=[delete], store=store)
    session = agent.session("s", store=sessions if call == "saved" else None)
    session.send("hello")
    paused = session.send("delete") if call in ("session-resume", "resolve") else None
    if when == "queued":
        interrupt_once_queued()
    try:
        if call == "session-send":
            result = session.send("block")
        elif call == "agent-send":  # a single run keyed "one": its sends share a queue
            result = agent.send("block", session_id="one")
        elif call == "saved":
            sessions.block = True
            result = session.send("quick")
        else:
            assert paused is not None and paused.approval_id is not None
            if call == "resolve":
                outcome = agent.approvals.resolve(paused.approval_id, approved=True)
            else:  # session-resume: decided in the store, then resumed
                assert store.approvals is not None
                store.approvals.resolve(paused.approval_id, approved=True)
                outcome = session.resume()
            assert outcome is not None
            result = outcome
        report("returned", text=result.text, reason=result.finish_reason, transcript=texts(session))
    except KeyboardInterrupt:
        report("interrupted", transcript=texts(session), pending=session.pending() is not None)
    # with the interrupted turn still running, this would wait behind it
    nxt = agent.send("next", session_id="one") if call == "agent-send" else session.send("next")
    report("next", text=nxt.text, transcript=texts(session), model_saw_abort=seen.get("aborted"))
    agent.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
