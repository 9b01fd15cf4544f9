"""examples/flask_app.py: Flask's test client, then gunicorn with several worker processes."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flask")

from flask.testing import FlaskClient
from flask_app import COOKIE, create_app  # examples/ is on pytest's pythonpath
from helpers import WAIT, Gate

from lousho_sessions import FunctionProvider, ModelRequest, create_agent, memory_store

TESTS = Path(__file__).parent
EXAMPLES = TESTS.parent / "examples"


def sse(body: str) -> list[tuple[str, dict[str, Any]]]:
    """Parse a server-sent event stream into (event, data) pairs."""
    events = []
    for block in body.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((fields["event"], json.loads(fields["data"])))
    return events


def strict_pairs(messages: list[dict[str, Any]]) -> bool:
    return [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2)


@pytest.fixture
def client() -> FlaskClient:
    return create_app().test_client()


def test_chat_is_keyed_by_the_session_cookie(client: FlaskClient) -> None:
    first = client.post("/chat", json={"message": "My name is Ali."})
    assert first.status_code == 200 and first.json is not None
    assert first.json["text"] == "Nice to meet you, Ali."
    cookie = client.get_cookie(COOKIE)
    assert cookie is not None and cookie.value == first.json["session_id"]
    again = client.post("/chat", json={"message": "What is my name?"})
    assert again.json is not None and again.json["text"] == "Your name is Ali."

    stranger = client.application.test_client()
    other = stranger.post("/chat", json={"message": "What is my name?"})
    assert other.json is not None and other.json["text"] == "I don't know your name yet."
    assert client.post("/chat", json={}).status_code == 400


def test_stream_sends_server_sent_events(client: FlaskClient) -> None:
    client.post("/chat", json={"message": "My name is Ali."})
    response = client.get("/chat/stream", query_string={"message": "What is my name?"})
    assert response.mimetype == "text/event-stream"
    events = sse(response.get_data(as_text=True))
    assert [name for name, _ in events][:2] == ["run.start", "step.start"]
    assert events[-1] == ("run.done", {"finish_reason": "stop"})
    assert "".join(d["text"] for name, d in events if name == "text.delta") == "Your name is Ali."
    history = client.get("/history").json
    assert history is not None and len(history) == 4 and strict_pairs(history)


def test_approval_endpoint_continues_the_paused_turn(client: FlaskClient) -> None:
    paused = client.post("/chat", json={"message": "Refund order 'A-17' please."}).json
    assert paused is not None and paused["finish_reason"] == "awaiting-approval"
    approval_id = paused["approval_id"]

    stranger = client.application.test_client()
    assert stranger.post(f"/approvals/{approval_id}", json={"approved": True}).status_code == 404
    assert client.post("/approvals/appr-unknown", json={"approved": True}).status_code == 404

    done = client.post(f"/approvals/{approval_id}", json={"approved": True}).json
    assert done is not None and done["finish_reason"] == "stop"
    assert done["text"] == "refund_order says: order A-17 refunded"
    history = client.get("/history").json
    assert history is not None
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]


def test_approval_stream_endpoint_streams_the_continued_turn(client: FlaskClient) -> None:
    paused = client.post("/chat", json={"message": "Refund order 'A-17' please."}).json
    assert paused is not None
    url = f"/approvals/{paused['approval_id']}/stream"
    stranger = client.application.test_client()
    assert stranger.post(url, json={"approved": True}).status_code == 404

    response = client.post(url, json={"approved": True})
    assert response.mimetype == "text/event-stream"
    events = sse(response.get_data(as_text=True))
    assert events[0][0] == "run.start" and events[-1] == ("run.done", {"finish_reason": "stop"})
    text = "".join(d["text"] for name, d in events if name == "text.delta")
    assert text == "refund_order says: order A-17 refunded"
    # decided already: the second request is refused before any stream, by both routes
    assert client.post(url, json={"approved": False}).status_code == 409
    assert client.post(url[: -len("/stream")], json={"approved": False}).status_code == 409
    history = client.get("/history").json
    assert history is not None and len(history) == 4


@pytest.mark.parametrize("cookie", ["../../etc/passwd", "a b", "x" * 300, ".hidden"])
def test_a_tampered_cookie_is_a_bad_request(client: FlaskClient, cookie: str) -> None:
    client.set_cookie(COOKIE, cookie)
    for response in (
        client.post("/chat", json={"message": "hi"}),
        client.get("/chat/stream", query_string={"message": "hi"}),
        client.get("/history"),
    ):
        assert response.status_code == 400
        assert f"invalid {COOKIE} cookie" in response.get_data(as_text=True)
    assert client.post("/approvals/not an id", json={"approved": True}).status_code == 404


def test_streamed_approval_request(client: FlaskClient) -> None:
    response = client.get("/chat/stream", query_string={"message": "Refund order 'B-2'."})
    events = sse(response.get_data(as_text=True))
    assert [name for name, _ in events][-2:] == ["approval.requested", "run.done"]
    assert events[-2][1]["tool"] == "refund_order"


def test_concurrent_requests_for_one_session_lose_no_turn() -> None:
    app = create_app()
    first = app.test_client()
    session_id = first.post("/chat", json={"message": "hello"}).json["session_id"]  # type: ignore[index]
    barrier = threading.Barrier(12, timeout=WAIT)
    statuses: list[int] = []

    def post(i: int) -> None:
        client = app.test_client()
        client.set_cookie(COOKIE, session_id)
        barrier.wait()
        statuses.append(client.post("/chat", json={"message": f"m{i}"}).status_code)

    threads = [threading.Thread(target=post, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert statuses == [200] * 12
    history = first.get("/history").json
    assert history is not None and len(history) == 26 and strict_pairs(history)


# -- a real WSGI server: gunicorn, several worker processes, one SQLite file --------------


class Server:
    def __init__(self, process: subprocess.Popen[str], host: str, port: int) -> None:
        self.process, self.host, self.port = process, host, port

    def request(
        self, method: str, path: str, body: Any = None, cookie: str | None = None
    ) -> tuple[int, dict[str, str], str]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=WAIT)
        headers = {"Content-Type": "application/json"}
        if cookie:
            headers["Cookie"] = f"{COOKIE}={cookie}"
        conn.request(method, path, json.dumps(body) if body is not None else None, headers)
        response = conn.getresponse()
        text = response.read().decode()
        conn.close()
        return response.status, dict(response.getheaders()), text


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    pytest.importorskip("gunicorn")
    workers = 3
    env = {**os.environ, "LOUSHO_DB": str(tmp_path / "chat.db")}
    command = [
        sys.executable, "-m", "gunicorn", "--workers", str(workers), "--bind", "127.0.0.1:0",
        "--pythonpath", f"{EXAMPLES},{TESTS}", "--no-control-socket", "--graceful-timeout", "5",
        "gunicorn_chat:app",
    ]  # fmt: skip
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    assert process.stderr is not None
    address = None
    booted = 0
    log: list[str] = []
    while booted < workers:  # read the log until the port is known and every worker booted
        line = process.stderr.readline()
        if not line:
            raise AssertionError("gunicorn exited:\n" + "".join(log))
        log.append(line)
        found = re.search(r"Listening at: http://([\d.]+):(\d+)", line)
        if found:
            address = found.group(1), int(found.group(2))
        booted += "Booting worker" in line
    assert address is not None
    drain = threading.Thread(target=lambda: log.extend(process.stderr or ()), daemon=True)
    drain.start()
    try:
        yield Server(process, *address)
    finally:
        process.terminate()
        process.wait(WAIT)
        drain.join(WAIT)
        process.stderr.close()
    assert "Traceback" not in "".join(log), "".join(log)


def test_gunicorn_workers_share_one_sqlite_store_and_lose_no_turn(server: Server) -> None:
    pytest.importorskip("lousho_sessions.sqlite")
    status, headers, body = server.request("POST", "/chat", {"message": "My name is Ali."})
    assert status == 200, body
    session_id = json.loads(body)["session_id"]
    assert f"{COOKIE}={session_id}" in headers["Set-Cookie"]

    n = 9
    barrier = threading.Barrier(n, timeout=WAIT)
    replies: dict[int, dict[str, Any]] = {}

    def post(i: int) -> None:
        barrier.wait()
        status, _, body = server.request("POST", "/chat", {"message": f"m{i}"}, session_id)
        assert status == 200, body
        replies[i] = json.loads(body)

    threads = [threading.Thread(target=post, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert len(replies) == n
    assert len({r["pid"] for r in replies.values()}) > 1  # served by several processes

    status, _, body = server.request("GET", "/history", cookie=session_id)
    history = json.loads(body)
    assert len(history) == 2 * (n + 1) and strict_pairs(history)
    for user, reply in zip(history[::2], history[1::2], strict=True):  # no interleaving
        assert reply["text"].startswith(f"You said: {user['text']} ") or "Ali" in reply["text"]

    # a streamed turn through the real server, then an approval decided by whichever worker
    status, headers, body = server.request(
        "GET", "/chat/stream?message=What%20is%20my%20name%3F", cookie=session_id
    )
    assert headers["Content-Type"].startswith("text/event-stream")
    events = sse(body)
    assert "".join(d["text"] for e, d in events if e == "text.delta") == "Your name is Ali."

    _, _, body = server.request("POST", "/chat", {"message": "Refund order 'Z-9'."}, session_id)
    approval_id = json.loads(body)["approval_id"]
    status, _, body = server.request(
        "POST", f"/approvals/{approval_id}", {"approved": True}, session_id
    )
    assert status == 200, body
    assert json.loads(body)["text"] == "refund_order says: order Z-9 refunded"
    _, _, body = server.request("GET", "/history", cookie=session_id)
    assert [m["role"] for m in json.loads(body)][-4:] == ["user", "assistant", "tool", "assistant"]


def test_a_client_leaving_the_stream_aborts_the_turn() -> None:
    gate = Gate()

    def model(request: ModelRequest) -> Iterator[str]:
        yield "one "
        gate.wait_in(request)  # False once the turn is aborted
        yield "two"

    agent = create_agent(provider=FunctionProvider(model), store=memory_store())
    client = create_app(agent).test_client()
    response = client.get("/chat/stream", query_string={"message": "hi"}, buffered=False)
    chunks = response.iter_encoded()
    while b"text.delta" not in next(chunks):  # read until the first delta
        pass
    assert gate.entered.wait(WAIT)
    response.close()  # what the WSGI server does when the client disconnects
    session = agent.session(client.get_cookie(COOKIE).value)  # type: ignore[union-attr]
    assert session.load() == ()
