"""A durable turn through ``OpenAIResponsesProvider`` in a process killed mid-turn.

``python responses_crash_child.py turn <kind> <where> <base_url> <log>`` runs one
turn of session "crash" (the model reasons, calls ``lookup``, reasons again and
answers) and SIGKILLs itself in the next model call, once the tool's result is saved (the
turn writes it when that call's request has left) and the server has answered it.
``... resume ...``
finishes it in a new process and prints the transcript's reasoning as JSON.
``kind`` is ``sqlite`` (``where`` a directory) or ``postgres`` (``where`` a schema).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from crash_harness import die_in_the_call_after, log

from lousho_sessions import ReasoningPart, create_agent, tool
from lousho_sessions.providers import OpenAIResponsesProvider, RetryPolicy
from lousho_sessions.stores.base import AgentStore

#: the checkpoint writes of the turn: the input, model call 1's response, the tool result
TOOL_RESULT_SAVED = 3


def open_store(kind: str, where: str) -> Any:
    if kind == "sqlite":
        from lousho_sessions.sqlite import SqliteStore

        return SqliteStore(Path(where) / "store.db")
    from services_pg import postgres_url

    from lousho_sessions.postgres import PostgresStore

    # a short lease: the resuming process waits for the killed one's to run out
    return PostgresStore(postgres_url(), schema=where, min_size=1, max_size=2, lease_ttl=2.0)


def main(mode: str, kind: str, where: str, base_url: str, logfile: str) -> None:
    db = open_store(kind, where)
    store = AgentStore(db.sessions, db.checkpoints, db.approvals)

    @tool
    def lookup(city: str) -> str:
        """The weather in a city."""
        log(logfile, f"lookup {city}")
        return f"18°C in {city}"

    provider = OpenAIResponsesProvider(
        "o4-mini",
        api_key="sk-crash-test",
        base_url=base_url,
        retry=RetryPolicy(max_retries=0),
        timeout=(5.0, 10.0),
    )
    if mode == "turn":
        die_in_the_call_after(provider, store.checkpoints, TOOL_RESULT_SAVED)
    agent = create_agent(provider=provider, tools=[lookup], store=store)
    session = agent.session("crash")
    if mode == "turn":
        session.send("Weather in Paris?")
        raise SystemExit("the turn finished: the process was to be killed before")
    result = session.resume()
    reasoning = [
        {"id": p.id, "data": p.data, "text": p.text}
        for m in session.load()
        for p in m.content
        if isinstance(p, ReasoningPart)
    ]
    print(json.dumps({"text": result.text if result else None, "reasoning": reasoning}))
    agent.close()
    db.close()


if __name__ == "__main__":
    main(*sys.argv[1:6])
