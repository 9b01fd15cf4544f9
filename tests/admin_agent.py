"""The agent the admin command tests give ``--agent admin_agent:make``, and a populator.

``python tests/admin_agent.py URL`` fills the store at URL with what the tests look
for: sessions ``alpha`` (two turns) and ``beta`` (one), ``gamma`` and ``eta`` paused
on an approval of ``deploy``. With ``ADMIN_TEST_CRASH=1`` it starts a turn in each
of ``CRASHED`` instead and the ``work`` tool ends the process once all three run,
so their turns stay ``running`` in the store, as after a crash.
"""

from __future__ import annotations

import os
import sys
import threading

from lousho_sessions import (
    Agent,
    FunctionProvider,
    Message,
    ModelRequest,
    ReasoningPart,
    TextPart,
    ToolCall,
    Usage,
    create_agent,
    open_store,
    tool,
)

__all__ = ["APPROVING", "CRASHED", "DONE", "USAGE", "make", "model", "populate"]

#: Sessions with finished turns, paused on an approval, and left running by a crash.
DONE = ("alpha", "beta")
APPROVING = ("eta", "gamma")
CRASHED = ("delta", "epsilon", "zeta")
_ALL_RUNNING = threading.Barrier(len(CRASHED))


#: what every model call reports (``lousho sessions list`` and ``show`` print the totals)
USAGE = Usage(100, 20, 0.001, cache_read_tokens=80, cache_write_tokens=10, reasoning_tokens=5)


def model(request: ModelRequest) -> Message:
    """Calls the tool a user message names (``call work``), then answers with its result."""
    last = request.messages[-1]
    if last.role == "user" and last.text.startswith("call "):
        name = last.text.split()[1]
        # reasoning before the call, as a thinking model sends it: every store, checkpoint,
        # migrate and export the admin tests run must keep it (and the call's place) exactly
        thinking = ReasoningPart(f"{name} it is", "anthropic", signature=f"sig-{name}")
        call = ToolCall(f"c{len(request.messages)}", name, {}, extra={"after_parts": 1})
        return Message.assistant([thinking, TextPart("on it")], tool_calls=(call,), usage=USAGE)
    if last.role == "tool":
        return Message.assistant(f"done: {last.text}", usage=USAGE)
    return Message.assistant(f"echo: {last.text}", usage=USAGE)


@tool
def work() -> str:
    """Do some work (ends the process under ADMIN_TEST_CRASH=1)."""
    if os.environ.get("ADMIN_TEST_CRASH") == "1":
        _ALL_RUNNING.wait(timeout=60)  # every crashed turn has its checkpoint by now
        os._exit(3)
    return "worked"


@tool(needs_approval=True)
def deploy() -> str:
    """Deploy, once a human approved."""
    return "deployed"


def make(store: object) -> Agent:
    """The agent on ``store`` (what ``--agent admin_agent:make`` calls)."""
    return create_agent(provider=FunctionProvider(model), tools=[work, deploy], store=store)


def populate(url: str) -> None:
    store = open_store(url)
    agent = make(store)
    if os.environ.get("ADMIN_TEST_CRASH") == "1":
        threads = [
            threading.Thread(target=agent.session(id).send, args=("call work",)) for id in CRASHED
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)  # the process ends in the tools before
        raise SystemExit("the work tool should have ended the process")
    agent.session("alpha").send("hello")
    agent.session("alpha").send("call work")
    agent.session("beta").send("hi")
    for id in APPROVING:
        result = agent.session(id).send("call deploy")
        assert result.finish_reason == "awaiting-approval", result
    agent.close()
    store.close()


if __name__ == "__main__":
    populate(sys.argv[1])
