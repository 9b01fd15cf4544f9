"""examples/starlette_app.py: an asyncio server, through Starlette's TestClient and httpx."""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, MutableMapping
from pathlib import Path
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

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


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


@pytest.mark.parametrize("cookie", ["../../etc/passwd", "a b", "x" * 300, ".hidden"])
def test_a_tampered_cookie_is_a_bad_request(client: TestClient, cookie: str) -> None:
    client.cookies[COOKIE] = cookie
    assert client.post("/chat", json={"message": "hi"}).status_code == 400
    assert client.get("/chat/stream", params={"message": "hi"}).status_code == 400
    assert client.get("/history").status_code == 400
    assert client.post("/approvals/not an id", json={"approved": True}).status_code == 404


# -- a real ASGI server: uvicorn on 127.0.0.1 ------------------------------------------------


def _read_events(response: http.client.HTTPResponse) -> Iterator[tuple[str, dict[str, Any]]]:
    """Server-sent events as they arrive (one ``event:``/``data:`` pair each)."""
    name = ""
    for raw in iter(response.readline, b""):
        line = raw.decode().rstrip("\r\n")
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            yield name, json.loads(line.removeprefix("data: "))


def test_uvicorn_serves_the_example_as_its_docstring_says(tmp_path: Path) -> None:
    """``uvicorn --factory starlette_app:create_app``, over TCP: cookies, a streamed turn."""
    pytest.importorskip("uvicorn")
    command = [
        sys.executable, "-m", "uvicorn", "--factory", "starlette_app:create_app",
        "--app-dir", str(EXAMPLES), "--host", "127.0.0.1", "--port", "0",
    ]  # fmt: skip
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    assert process.stderr is not None
    log: list[str] = []
    address = None
    while address is None:  # read the log until uvicorn says where it listens
        line = process.stderr.readline()
        if not line:
            raise AssertionError("uvicorn exited:\n" + "".join(log))
        log.append(line)
        found = re.search(r"running on http://([\d.]+):(\d+)", line)
        if found:
            address = found.group(1), int(found.group(2))
    drain = threading.Thread(target=lambda: log.extend(process.stderr or ()), daemon=True)
    drain.start()
    try:
        conn = http.client.HTTPConnection(*address, timeout=WAIT)
        body = json.dumps({"message": "My name is Ali."})
        conn.request("POST", "/chat", body, {"Content-Type": "application/json"})
        reply = conn.getresponse()
        first = json.loads(reply.read())
        assert reply.status == 200 and first["text"] == "Nice to meet you, Ali."
        cookie = f"{COOKIE}={first['session_id']}"
        assert cookie in (reply.getheader("set-cookie") or "")

        conn.request(
            "GET", "/chat/stream?message=What%20is%20my%20name%3F", None, {"Cookie": cookie}
        )
        stream = conn.getresponse()
        assert stream.status == 200
        assert (stream.getheader("content-type") or "").startswith("text/event-stream")
        events = list(_read_events(stream))
        assert events[-1] == ("run.done", {"finish_reason": "stop"})
        assert "".join(d["text"] for e, d in events if e == "text.delta") == "Your name is Ali."

        conn.request("GET", "/history", None, {"Cookie": f"{COOKIE}=../../etc/passwd"})
        refused = conn.getresponse()
        refused.read()
        assert refused.status == 400
        conn.close()
    finally:
        process.terminate()
        process.wait(WAIT)
        drain.join(WAIT)
        process.stderr.close()
    assert "Traceback" not in "".join(log), "".join(log)


def test_uvicorn_streams_each_delta_as_it_comes() -> None:
    """A delta reaches the client through uvicorn while the model is still blocked."""
    uvicorn = pytest.importorskip("uvicorn")
    gate = Gate()

    def model(request: ModelRequest) -> Iterator[str]:
        yield "first "
        gate.wait_in(request)
        yield "second"

    agent = create_agent(provider=FunctionProvider(model), store=memory_store())
    listener = socket.create_server(("127.0.0.1", 0))  # listening now: no wait for startup
    config = uvicorn.Config(create_app(agent), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    host, port = listener.getsockname()[:2]
    conn = http.client.HTTPConnection(host, port, timeout=WAIT)
    try:
        conn.request("GET", "/chat/stream?message=hi")
        events = _read_events(conn.getresponse())
        name, data = next(e for e in events if e[0] == "text.delta")
        assert (name, data) == ("text.delta", {"text": "first "})
        # the delta came while the model is held at the gate (it may get there just after)
        assert gate.entered.wait(WAIT)
        gate.open()
        rest = list(events)
        assert ("text.delta", {"text": "second"}) in rest
        assert rest[-1] == ("run.done", {"finish_reason": "stop"})
    finally:
        conn.close()
        gate.open()
        server.should_exit = True
        thread.join(WAIT)
        listener.close()
    assert not thread.is_alive()
