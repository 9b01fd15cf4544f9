"""U+0000 in what a user types or a tool returns, on every store (issue 27 item 6).

PostgreSQL's ``json`` keeps a ``\\u0000`` escape as text, but any function that turns
the JSON's strings into ``text`` (``json_each``, ``->>``) refuses it, and one such
checkpoint made the one query over every pending turn fail: ``stale_turns``,
``sweep``, ``lousho sweep`` and ``lousho doctor`` all raised for the whole store. A
pending turn holding U+0000 must be listed and finished like any other, beside the
others, and the character must come back as it was sent.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fork_server
import psycopg
import pytest
from helpers import until
from services_pg import drop_schema, postgres_url, require_postgres
from services_redis import drop_prefix, redis_url, require_redis

from lousho_sessions import (
    FunctionProvider,
    Message,
    ModelRequest,
    ProviderError,
    ToolCall,
    create_agent,
    tool,
)
from lousho_sessions import open_store as open_url
from lousho_sessions.recovery import stale_turns, sweep

KINDS = ("sqlite", "files", "postgres", "redis")
NUL = "a\x00b"


@tool
def echo_back(text: str) -> str:
    """Returns ``text`` with a U+0000 of its own."""
    return f"{text}|tool\x00out"


@pytest.fixture
def schema() -> Iterator[str]:
    require_postgres()
    name = "t_nul_" + secrets.token_hex(6)
    try:
        yield name
    finally:
        drop_schema(name)


@pytest.fixture(params=KINDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    kind = request.param
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path}/nul.db"
    elif kind == "files":
        yield f"file://{tmp_path}/files"
    elif kind == "postgres":
        yield f"{postgres_url()}?schema={request.getfixturevalue('schema')}&lease_ttl=1"
    else:
        require_redis()
        prefix = "lousho-test-nul-" + secrets.token_hex(6)
        try:
            yield f"{redis_url()}?prefix={prefix}&lease_ttl=1"
        finally:
            drop_prefix(prefix)


def failing(request: ModelRequest) -> Message:
    raise RuntimeError("the worker died here")  # transient: the turn stays pending


def calling_the_tool(request: ModelRequest) -> Message:
    last = request.messages[-1]
    if last.role == "user":
        return Message.assistant("", tool_calls=[ToolCall("c1", "echo_back", {"text": last.text})])
    return Message.assistant(f"done\x00{last.text}")


def lousho(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LOUSHO_STORE"}
    return fork_server.run(
        ["-m", "lousho_sessions", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def wait_stale(url: str, count: int) -> list[Any]:
    found: list[Any] = []

    def enough() -> bool:
        with open_url(url) as store:
            found[:] = stale_turns(store)
        return len(found) >= count

    until(enough, f"{count} stale turns", timeout=15)  # leases of 1 s run out
    return found


def test_a_pending_turn_holding_u0000_is_listed_swept_and_read_back_beside_the_others(
    url: str,
) -> None:
    with open_url(url) as store:
        agent = create_agent(provider=FunctionProvider(failing), store=store)
        for sid, text in (("bad", NUL), ("good", "plain")):
            with pytest.raises(ProviderError):
                agent.session(sid).send(text)
        agent.close()
    stale = wait_stale(url, 2)  # failed for the whole store on PostgreSQL
    assert sorted(t.session_id for t in stale) == ["bad", "good"]

    doctor = lousho("doctor", "--store", url, "--json")
    assert doctor.returncode in (0, 1), doctor.stderr  # 3: the scan failed
    checks = {c["check"]: c for c in json.loads(doctor.stdout)}
    assert "2 of them stale" in checks["turns"]["detail"], checks

    with open_url(url) as store:
        agent = create_agent(provider=FunctionProvider(lambda r: "fine"), store=store)
        swept = sweep(store, agent=agent)
        agent.close()
        assert sorted((t.session_id, t.outcome) for t in swept) == [
            ("bad", "finished"),
            ("good", "finished"),
        ]
        assert store.sessions is not None
        bad = store.sessions.load("bad")
        assert bad is not None and bad[0].text == NUL  # the character came back as sent
        assert stale_turns(store) == []


def test_u0000_in_user_input_and_tool_output_is_stored_and_read_back(url: str) -> None:
    with open_url(url) as store:
        agent = create_agent(
            provider=FunctionProvider(calling_the_tool), store=store, tools=[echo_back]
        )
        result = agent.session("s").send(NUL)
        agent.close()
        assert result.text == f"done\x00{NUL}|tool\x00out"
    with open_url(url) as store:
        assert store.sessions is not None
        messages = store.sessions.load("s")
        assert messages is not None
        assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
        assert messages[0].text == NUL
        assert messages[2].text == f"{NUL}|tool\x00out"
        assert messages[3].text == f"done\x00{NUL}|tool\x00out"


def test_a_checkpoint_written_by_hand_that_is_not_an_object_is_named_not_blocking(
    schema: str,
) -> None:
    url = f"{postgres_url()}?schema={schema}&lease_ttl=1"
    with open_url(url) as store:
        agent = create_agent(provider=FunctionProvider(failing), store=store)
        with pytest.raises(ProviderError):
            agent.session("good").send("plain")
        agent.close()
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        conn.execute(
            f'INSERT INTO "{schema}".checkpoints (turn_id, body) VALUES (%s, %s)',
            ("broken.turn-0", "[1]"),
        )
    assert [t.session_id for t in wait_stale(url, 1)] == ["good"]
    doctor = lousho("doctor", "--store", url, "--json")
    assert doctor.returncode == 1, doctor.stderr
    turns = {c["check"]: c for c in json.loads(doctor.stdout)}["turns"]
    assert turns["status"] == "warn"
    assert "1 unreadable (broken.turn-0" in turns["detail"], turns
