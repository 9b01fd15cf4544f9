"""examples/starlette_app.py: an asyncio server, through Starlette's TestClient and httpx."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx2")  # what starlette.testclient uses

import httpx2 as httpx
from helpers import WAIT, Gate
from starlette.testclient import TestClient
from starlette_app import COOKIE, create_app, refund_order  # examples/ is on pytest's pythonpath

from lousho_sessions import FunctionProvider, ModelRequest, memory_store
from lousho_sessions.aio import create_agent


def sse(body: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in body.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((fields["event"], json.loads(fields["data"])))
    return events


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(create_app()) as client:  # runs the lifespan too
        yield client


def test_chat_and_history(client: TestClient) -> None:
    first = client.post("/chat", json={"message": "My name is Ali."}).json()
    assert first["text"] == "Nice to meet you, Ali."
    assert client.cookies[COOKIE] == first["session_id"]
    assert client.post("/chat", json={"message": "What is my name?"}).json()["text"] == (
        "Your name is Ali."
    )
    assert len(client.get("/history").json()) == 4
    assert client.post("/chat", json={"message": " "}).status_code == 400


def test_streaming_endpoint(client: TestClient) -> None:
    client.post("/chat", json={"message": "My name is Ali."})
    with client.stream("GET", "/chat/stream", params={"message": "What is my name?"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse(response.read().decode())
    assert events[0][0] == "run.start" and events[-1] == ("run.done", {"finish_reason": "stop"})
    assert "".join(d["text"] for e, d in events if e == "text.delta") == "Your name is Ali."
    assert len(client.get("/history").json()) == 4


def test_approval_endpoint(client: TestClient) -> None:
    paused = client.post("/chat", json={"message": "Refund order 'A-17'."}).json()
    assert paused["finish_reason"] == "awaiting-approval"
    approval_id = paused["approval_id"]
    with TestClient(client.app) as stranger:
        response = stranger.post(f"/approvals/{approval_id}", json={"approved": True})
        assert response.status_code == 404
    done = client.post(f"/approvals/{approval_id}", json={"approved": True}).json()
    assert done["text"] == "refund_order says: order A-17 refunded"
    assert client.post("/approvals/appr-x", json={"approved": True}).status_code == 404


def test_the_loop_serves_other_requests_while_a_turn_blocks() -> None:
    gate = Gate()

    def model(request: ModelRequest) -> Iterator[str]:
        yield "thinking... "
        if request.messages[-1].text == "block":
            gate.wait_in(request)
        yield "done"

    agent = create_agent(
        provider=FunctionProvider(model), tools=[refund_order], store=memory_store()
    )
    app = create_app(agent)

    async def main() -> tuple[list[str], str]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            slow = asyncio.create_task(client.get("/chat/stream", params={"message": "block"}))
            assert await asyncio.to_thread(gate.entered.wait, WAIT)
            # the model is blocked inside the turn; the loop still answers
            answers = [(await client.get("/health")).text for _ in range(3)]
            fast = await client.post("/chat", json={"message": "quick"})
            assert not slow.done()
            gate.open()
            streamed = await slow
            return [*answers, fast.json()["text"]], streamed.text

    answers, streamed = asyncio.run(main())
    assert answers == ['{"ok":true}'] * 3 + ["thinking... done"]
    assert "".join(d["text"] for e, d in sse(streamed) if e == "text.delta") == "thinking... done"


def test_concurrent_posts_to_one_session_stay_in_order() -> None:
    app = create_app()

    async def main() -> list[dict[str, Any]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            await client.post("/chat", json={"message": "hello"})
            await asyncio.gather(
                *(client.post("/chat", json={"message": f"m{i}"}) for i in range(20))
            )
            history: list[dict[str, Any]] = (await client.get("/history")).json()
            return history

    history = asyncio.run(main())
    assert [m["role"] for m in history] == ["user", "assistant"] * 21
    assert threading.active_count() < 100
