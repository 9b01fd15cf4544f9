"""examples/starlette_app.py: an asyncio server, through Starlette's TestClient and httpx."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator, MutableMapping
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


def test_a_client_leaving_the_stream_aborts_the_turn() -> None:
    gate = Gate()

    def model(request: ModelRequest) -> Iterator[str]:
        yield "one "
        gate.wait_in(request)  # False once the turn is aborted
        yield "two"

    agent = create_agent(provider=FunctionProvider(model), store=memory_store())
    app = create_app(agent)

    async def main() -> list[bytes]:
        first_delta = asyncio.Event()
        sent: list[bytes] = []
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
            "scheme": "http", "path": "/chat/stream", "raw_path": b"/chat/stream",
            "query_string": b"message=hi", "root_path": "", "server": ("test", 80),
            "client": ("127.0.0.1", 1234), "headers": [(b"cookie", f"{COOKIE}=leaver".encode())],
        }  # fmt: skip
        requested = False

        async def receive() -> dict[str, Any]:
            nonlocal requested
            if not requested:
                requested = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await first_delta.wait()  # the client reads one delta, then goes away
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            body = message.get("body", b"")
            sent.append(body)
            if b"text.delta" in body:
                first_delta.set()

        await app(scope, receive, send)  # returns once the disconnect cancelled the response
        return sent

    sent = asyncio.run(main())
    assert any(b"text.delta" in chunk for chunk in sent)
    assert not any(b"run.done" in chunk for chunk in sent)
    assert agent.sync.session("leaver").load() == ()  # aborted: nothing saved
