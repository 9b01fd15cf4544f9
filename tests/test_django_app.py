"""examples/django_app: a sync view and an async view over one store, through Django's test clients."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from typing import Any

import pytest

pytest.importorskip("django")

import django
from django.test import AsyncClient, Client
from helpers import WAIT

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_app.settings")  # examples/ is on the path
django.setup()

COOKIE = "lousho_session"


def post(client: Client, path: str, message: str) -> dict[str, Any]:
    response = client.post(path, json.dumps({"message": message}), content_type="application/json")
    assert response.status_code == 200, response.content
    data: dict[str, Any] = response.json()
    return data


def test_sync_and_async_views_continue_one_conversation() -> None:
    client = Client()
    first = post(client, "/chat", "My name is Ali.")
    assert first["text"] == "Nice to meet you, Ali."
    assert client.cookies[COOKIE].value == first["session_id"]
    second = post(client, "/chat/async", "What is my name?")  # async view, same cookie and store
    assert second == {**first, "text": "Your name is Ali.", "finish_reason": "stop"}
    assert len(client.get("/history").json()) == 4


def test_async_view_through_the_async_client() -> None:
    async def main() -> list[str]:
        client = AsyncClient()
        body = json.dumps({"message": "My name is Ada."})
        first = await client.post("/chat/async", body, content_type="application/json")
        session_id = first.json()["session_id"]
        client.cookies[COOKIE] = session_id
        asked = json.dumps({"message": "What is my name?"})
        replies = await asyncio.gather(
            *(client.post("/chat/async", asked, content_type="application/json") for _ in range(5))
        )
        return [r.json()["text"] for r in replies]

    assert asyncio.run(main()) == ["Your name is Ada."] * 5


def test_streaming_view_sends_server_sent_events() -> None:
    client = Client()
    post(client, "/chat", "My name is Ali.")
    response = client.get("/chat/stream", {"message": "What is my name?"})
    assert response["Content-Type"] == "text/event-stream"
    body = b"".join(response.streaming_content).decode()
    deltas = [
        json.loads(block.split("data: ", 1)[1])["text"]
        for block in body.split("\n\n")
        if block.startswith("event: text.delta")
    ]
    assert "".join(deltas) == "Your name is Ali."
    assert body.rstrip().splitlines()[-2] == "event: run.done"


def test_concurrent_sync_and_async_requests_lose_no_turn() -> None:
    client = Client()
    session_id = post(client, "/chat", "hello")["session_id"]
    barrier = threading.Barrier(10, timeout=WAIT)
    errors: list[BaseException] = []

    def send(i: int) -> None:
        try:
            mine = Client()
            mine.cookies[COOKIE] = session_id
            barrier.wait()
            post(mine, "/chat/async" if i % 2 else "/chat", f"m{i}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert not errors
    history = client.get("/history").json()
    assert [m["role"] for m in history] == ["user", "assistant"] * 11
    for user, reply in zip(history[::2], history[1::2], strict=True):
        assert user["text"] in reply["text"]


def test_bad_request() -> None:
    assert Client().post("/chat", "{}", content_type="application/json").status_code == 400
    assert Client().get("/chat/stream").status_code == 400


@pytest.mark.parametrize("cookie", ["../../etc/passwd", "a b", "x" * 300, ".hidden"])
def test_a_tampered_cookie_is_a_bad_request(cookie: str) -> None:
    client = Client()
    client.cookies[COOKIE] = cookie
    body = json.dumps({"message": "hi"})
    for response in (
        client.post("/chat", body, content_type="application/json"),
        client.get("/chat/stream", {"message": "hi"}),
        client.get("/history"),
    ):
        assert response.status_code == 400

    async def main() -> int:
        async_client = AsyncClient()
        async_client.cookies[COOKIE] = cookie
        response = await async_client.post("/chat/async", body, content_type="application/json")
        status: int = response.status_code
        return status

    assert asyncio.run(main()) == 400
