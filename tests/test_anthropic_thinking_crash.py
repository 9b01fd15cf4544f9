"""A worker SIGKILLed in the model call after a tool result, once that result is saved (it is
written when the call's request has left): another process finishes
the turn and gives the model back the same thinking blocks, byte for byte (the server
enforces the API's thinking rules and compares the two requests)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import fork_server
import pytest
from anthropic_rules import AnthropicThinkingRules
from provider_server import ProviderServer, SSEReply, StallReply, sse_events
from services_pg import drop_schema, postgres_url, require_postgres, schema_for

from lousho_sessions import open_store

WORKER = str(Path(__file__).with_name("thinking_worker.py"))
TESTS = str(Path(__file__).parent)


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/trip.db"
        return
    require_postgres()
    schema = schema_for(tmp_path)
    # a short lease: the killed worker's lease must run out before the other resumes
    yield f"{postgres_url()}{'&' if '?' in postgres_url() else '?'}schema={schema}&lease_ttl=1"
    drop_schema(schema)


def worker(*args: str) -> list[str]:
    return [WORKER, *args]


def wait_for_a_result(url: str) -> None:
    """Wait until a checkpoint of session "trip" holds a tool result (another process
    writes it: its store is looked at again every 20 ms, for up to 30 s)."""
    pause = threading.Event()
    with open_store(url) as store:
        checkpoints = store.checkpoints
        assert checkpoints is not None
        for _ in range(1500):
            for key in checkpoints.list("trip."):
                if (checkpoints.load(key) or {}).get("results"):
                    return
            pause.wait(0.02)
    raise AssertionError("no tool result of the killed worker's turn was saved")


def test_a_killed_worker_resumes_elsewhere_with_the_same_thinking(
    store_url: str, tmp_path: Path
) -> None:
    rules = AnthropicThinkingRules()
    logfile = str(tmp_path / "ran.log")
    env = {**os.environ}  # tests/ importable, before what the runner imports
    env["PYTHONPATH"] = os.pathsep.join(p for p in (TESTS, env.get("PYTHONPATH", "")) if p)
    with ProviderServer(rules=rules) as server:
        server.reply(
            SSEReply(sse_events("anthropic", "thinking_tool_use")),
            StallReply(),  # the call after get_weather's result: the worker dies in it
            SSEReply(sse_events("anthropic", "interleaved_tool_use")),
            SSEReply(sse_events("anthropic", "thinking_text")),
        )
        first = fork_server.Popen(
            worker("turn", store_url, server.url, logfile),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            # wait for the stalled call, or for the worker to end without making it
            while not server.stalled.wait(0.2) and first.poll() is None:
                pass
            assert server.stalled.is_set(), "the worker never made its second model call"
            # the tool's result is written once that call's request has left: wait for it
            wait_for_a_result(store_url)
        finally:
            os.kill(first.pid, signal.SIGKILL)
            _, err = first.communicate(timeout=30)
        assert first.returncode == -signal.SIGKILL, err
        server.release.set()
        second = fork_server.run(
            worker("resume", store_url, server.url, logfile),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 0, second.stderr
        outcome = json.loads(second.stdout)
        killed, resumed = server.requests[1].body, server.requests[2].body
    assert rules.refusals == []
    assert outcome["text"] == "It is 18C in Paris (12:00) and 16C in Lyon."
    # the resumed call sent what the killed one did, thinking and signatures byte for byte
    assert json.dumps(resumed["messages"]) == json.dumps(killed["messages"])
    assert killed["messages"][1]["content"][0]["type"] == "thinking"
    assert rules.checked == 3  # the killed call, the resumed one, and the last step
    assert [len(r) for r in outcome["reasoning"]] == [1, 3, 1]
    ran = Path(logfile).read_text().splitlines()
    assert ran.count("get_weather Paris") == 1  # a recorded result is not run again
    assert sorted(ran) == ["get_time Europe/Paris", "get_weather Lyon", "get_weather Paris"]
