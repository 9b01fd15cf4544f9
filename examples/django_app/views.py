"""Views: ``chat`` blocks (a thread of a WSGI server), ``chat_async`` awaits (ASGI).

Both use one agent and one store, so a browser's conversation continues whichever
view it calls, and whichever process serves it when ``LOUSHO_DB`` is set.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.core.exceptions import BadRequest
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse

from lousho_sessions import (
    ExecutionResult,
    InvalidSessionIdError,
    Session,
    create_agent,
    memory_store,
)
from lousho_sessions.aio import AsyncSession

COOKIE = "lousho_session"


def _store() -> Any:
    if settings.LOUSHO_DB:
        from lousho_sessions.sqlite import SqliteStore

        return SqliteStore(settings.LOUSHO_DB)
    return memory_store()


agent = create_agent(instructions="You are a helpful assistant.", store=_store())


def _session(request: HttpRequest) -> Session:
    """The cookie's session (a new one without a cookie); ``BadRequest`` (400) for a tampered one."""
    try:  # the cookie is client input: the SDK refuses ids that are not plain names
        return agent.session(request.COOKIES.get(COOKIE) or str(uuid.uuid4()))
    except InvalidSessionIdError as exc:
        raise BadRequest(f"invalid {COOKIE} cookie; delete it to start a new conversation") from exc


def _message(request: HttpRequest) -> str | None:
    try:
        text = json.loads(request.body or b"{}").get("message")
    except (ValueError, AttributeError):
        return None
    return text if isinstance(text, str) and text.strip() else None


def _reply(result: ExecutionResult, session_id: str) -> JsonResponse:
    response = JsonResponse(
        {"text": result.text, "finish_reason": result.finish_reason, "session_id": session_id}
    )
    response.set_cookie(COOKIE, session_id, httponly=True, samesite="Lax")
    return response


def chat(request: HttpRequest) -> HttpResponse:
    """POST ``{"message": ...}``: a blocking turn."""
    text = _message(request)
    if request.method != "POST" or text is None:
        return JsonResponse({"error": "POST a non-empty 'message'"}, status=400)
    session = _session(request)
    return _reply(session.send(text), session.id)


async def chat_async(request: HttpRequest) -> HttpResponse:
    """The same, awaited: the event loop stays free while the worker thread runs the turn."""
    text = _message(request)
    if request.method != "POST" or text is None:
        return JsonResponse({"error": "POST a non-empty 'message'"}, status=400)
    session = AsyncSession(_session(request))
    return _reply(await session.send(text), session.id)


def chat_stream(request: HttpRequest) -> HttpResponse:
    """GET ``?message=...``: the turn as server-sent events."""
    text = request.GET.get("message", "")
    if not text.strip():
        return JsonResponse({"error": "give a non-empty 'message'"}, status=400)
    session = _session(request)
    run = session.stream(text)

    def events() -> Iterator[str]:
        with run:
            for event in run:
                data = {"text": event.text} if event.type == "text.delta" else {}
                yield f"event: {event.type}\ndata: {json.dumps(data)}\n\n"

    response = StreamingHttpResponse(events(), content_type="text/event-stream")
    response.set_cookie(COOKIE, session.id, httponly=True, samesite="Lax")
    return response


def history(request: HttpRequest) -> HttpResponse:
    messages = [{"role": m.role, "text": m.text} for m in _session(request).load()]
    return JsonResponse(messages, safe=False)
