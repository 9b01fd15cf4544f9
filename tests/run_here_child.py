"""A process whose main thread runs a turn (``send()`` on an idle session runs it there)
until the test sends SIGINT, with Python's default SIGINT handler (``tests/test_run_here.py``).

``python run_here_child.py block``: the model call waits until the turn is aborted. It
prints one JSON object a line: ``{"at": "blocked", "thread": ...}``, then what the call did
(``{"at": "interrupted", ...}`` or ``{"at": "returned", ...}``), then ``{"at": "next", ...}``
after a further ``send()``. ``stubborn``: the model call ignores the abort (it says
``{"at": "stopping"}`` when it sees it), so only a second SIGINT ends the call.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from typing import Any

from lousho_sessions import FunctionProvider, ModelRequest, create_agent

seen: dict[str, Any] = {}


def report(at: str, **fields: Any) -> None:
    print(json.dumps({"at": at, **fields}), flush=True)


def main(mode: str) -> None:
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    forever = threading.Event()

    def model(request: ModelRequest) -> str:
        last = request.messages[-1].text
        if last != "block":
            return f"answer to {last}"
        aborted = threading.Event()
        request.signal.add_callback(lambda s: aborted.set())
        main = threading.current_thread() is threading.main_thread()
        report("blocked", thread="main" if main else threading.current_thread().name)
        aborted.wait(60)
        seen["aborted"] = request.signal.aborted
        if mode == "stubborn":
            report("stopping")
            forever.wait(60)
        return "late answer"

    agent = create_agent(provider=FunctionProvider(model))
    session = agent.session("s")
    session.send("hello")
    try:
        result = session.send("block")
        report("returned", text=result.text, reason=result.finish_reason)
    except KeyboardInterrupt:
        report("interrupted", transcript=[m.text for m in session.load()])
    if mode == "stubborn":
        return
    nxt = session.send("next")
    report(
        "next",
        text=nxt.text,
        model_saw_abort=seen.get("aborted"),
        handler_restored=signal.getsignal(signal.SIGINT) is signal.default_int_handler,
    )
    agent.close()


if __name__ == "__main__":
    main(sys.argv[1])
