"""A durable turn with typed output in a real process that dies mid-turn (tests/test_output_durable.py).

``python output_child.py turn <dir> <log> <where>`` runs a turn of session "out" on a
SQLite store under ``<dir>``: the model asks for ``lookup``, then answers a bill
(``where`` = "repair": first a bill that does not fit, then, in the repair round, it
dies); with ``where`` = "final" it dies making the final answer. ``resume <dir> <log>
<how>`` finishes the turn in a new process, the output type given by the agent
(``how`` = "agent") or by ``resume()`` (``how`` = "call"), and prints the result and
the stored transcript as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from output_cases import BAD_BILL, GOOD_BILL, Bill

from lousho_sessions import FunctionProvider, Message, ModelRequest, ToolCall, create_agent, tool
from lousho_sessions.sqlite import SqliteStore


def log(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def main(mode: str, folder: str, logfile: str, arg: str) -> None:
    store = SqliteStore(Path(folder) / "store.db")

    @tool
    def lookup(name: str) -> str:
        """Look a price up."""
        log(logfile, f"lookup {mode}")
        return "1"

    def model(request: ModelRequest) -> Message | str:
        assert request.output_schema is not None and request.output_schema.name == "Bill"
        answered = sum(1 for m in request.messages if m.role == "assistant" and not m.tool_calls)
        step = (
            "model-tool" if not any(m.role == "tool" for m in request.messages) else "model-answer"
        )
        log(logfile, f"{step} {mode} {answered}")
        if step == "model-tool":
            return Message.assistant("", tool_calls=[ToolCall("c1", "lookup", {"name": "a"})])
        if mode == "turn":
            if arg == "repair" and answered == 0:
                return json.dumps(BAD_BILL)
            os.kill(os.getpid(), signal.SIGKILL)  # dies making the (repaired) final answer
        return json.dumps(GOOD_BILL)

    agent_type = Bill if mode == "turn" or arg == "agent" else None
    agent = create_agent(
        provider=FunctionProvider(model), tools=[lookup], store=store, output_type=agent_type
    )
    session = agent.session("out")
    if mode == "turn":
        session.send("bill please")
        raise SystemExit("the turn was meant to die")
    result = session.resume(output_type=Bill if arg == "call" else None)
    assert result is not None
    stored = session.load()
    out = {
        "output": repr(result.output),
        "text": result.text,
        "transcript": [[m.role, m.text[:40], [c.name for c in m.tool_calls]] for m in stored],
    }
    agent.close()
    store.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:5])
