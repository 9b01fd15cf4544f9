"""What the tests of writes made once a model request has left share (``test_owed_result``,
``test_read_only_tools``): a loopback server speaking Anthropic's wire, its two answers
(a step asking for ``get_weather`` and ``get_time``, then a text), and a send on a thread
of its own while a second SQLite connection holds the write lock."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from provider_server import ProviderServer, SSEReply, sse_events

from lousho_sessions import create_agent
from lousho_sessions.providers import RetryPolicy
from lousho_sessions.providers.anthropic import AnthropicProvider

WAIT = 30.0


def tool_use(**headers: str) -> SSEReply:
    """The model asks for ``get_weather`` and ``get_time`` at once."""
    return SSEReply(sse_events("anthropic", "tool_use"), headers=headers)


def answer() -> SSEReply:
    return SSEReply(sse_events("anthropic", "text"))


def provider(url: str) -> AnthropicProvider:
    return AnthropicProvider(
        "claude-sonnet-4-5", api_key="k", base_url=url, retry=RetryPolicy(max_retries=0)
    )


def requests_reach(server: ProviderServer, count: int) -> None:
    """Wait until ``server`` has recorded ``count`` requests."""
    while len(server.requests) < count:
        server.received.clear()
        if len(server.requests) >= count:
            return
        assert server.received.wait(WAIT), f"the server never got request {count}"


@contextlib.contextmanager
def answering_agent(tools: list[Any], store: Any) -> Iterator[tuple[ProviderServer, Any]]:
    """A server that answers with the step (``tool_use``) and then a text, and an agent of
    ``tools`` and ``store`` on it, closed at the end."""
    with ProviderServer() as server:
        server.reply(tool_use(), answer())
        agent = create_agent(provider=provider(server.url), tools=tools, store=store)
        try:
            yield server, agent
        finally:
            agent.close()


@contextlib.contextmanager
def sent_while_locked(
    send: Any, server: ProviderServer, blocker: sqlite3.Connection, requests: int
) -> Iterator[list[Any]]:
    """Run ``send()`` on a thread of its own; once ``server`` has ``requests`` requests the
    block runs, ``blocker`` still holding SQLite's write lock (a transaction it began); then
    the lock is let go and the send ends. The list yielded holds its result afterwards."""
    outcome: list[Any] = []
    sender = threading.Thread(target=lambda: outcome.append(send()))
    sender.start()
    try:
        requests_reach(server, requests)
        yield outcome
    finally:
        blocker.execute("ROLLBACK")
        sender.join(WAIT)
    assert not sender.is_alive()


def checkpoints(path: Path, session: str) -> dict[str, dict[str, Any]]:
    """The checkpoints and result records of ``session``'s turns stored in the SQLite file
    ``path``, read on a connection of the test's own."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT turn_id, json FROM checkpoints WHERE turn_id LIKE ?", (f"{session}.%",)
        ).fetchall()
    finally:
        conn.close()
    return {key: json.loads(text) for key, text in rows}
