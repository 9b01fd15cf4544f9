"""An asyncio chat server (Starlette): awaited turns, a streamed endpoint, approvals.

- ``POST /chat`` ``{"message": "..."}``: one turn of the cookie's session.
- ``GET /chat/stream?message=...``: the turn as server-sent events; a client that
  disconnects cancels the response, which aborts the turn.
- ``POST /approvals/{id}`` ``{"approved": true}``: decide a paused tool call.
- ``GET /history``, ``GET /health``.

Each turn runs on its session's worker thread; the handlers only await it, so the
event loop keeps serving other requests meanwhile. Run with any ASGI server::

    uvicorn --factory starlette_app:create_app

FastAPI is Starlette underneath: the same handler bodies work there.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from lousho_sessions import (
    ApprovalNotFoundError,
    Event,
    ExecutionResult,
    InvalidSessionIdError,
    memory_store,
    tool,
)
from lousho_sessions.aio import AsyncAgent, AsyncSession, create_agent

COOKIE = "lousho_session"


@tool(needs_approval=True)
def refund_order(order_id: str) -> str:
    """Refund an order in full."""
    return f"order {order_id} refunded"


def result_json(result: ExecutionResult) -> dict[str, Any]:
    return {
        "text": result.text,
        "finish_reason": result.finish_reason,
        "approval_id": result.approval_id,
        "session_id": result.session_id,
    }


def sse(event: Event) -> str:
    data: dict[str, Any] = {}
    if event.type == "text.delta":
        data = {"text": event.text}
    elif event.type == "run.done":
        data = {"finish_reason": event.finish_reason}
    elif event.type == "approval.requested":
        data = {"approval_id": event.approval_id}
    return f"event: {event.type}\ndata: {json.dumps(data)}\n\n"


def create_app(agent: AsyncAgent | None = None) -> Starlette:
    agent = agent or create_agent(
        instructions="You are a shop assistant.",
        tools=[refund_order],
        store=memory_store(),  # one store for every session (SqliteStore(path) to keep them)
    )

    def session_of(request: Request) -> AsyncSession:
        """The cookie's session (a new one without a cookie); 400 for a tampered cookie."""
        try:  # the cookie is client input: the SDK refuses ids that are not plain names
            return agent.session(request.cookies.get(COOKIE) or str(uuid.uuid4()))
        except InvalidSessionIdError as exc:
            raise HTTPException(400, f"invalid {COOKIE} cookie") from exc

    def remember(response: Response, session: AsyncSession) -> Response:
        response.set_cookie(COOKIE, session.id, httponly=True, samesite="lax")
        return response

    async def chat(request: Request) -> Response:
        body = await request.json()
        message = body.get("message") if isinstance(body, dict) else None
        if not isinstance(message, str) or not message.strip():
            return JSONResponse({"error": "send a non-empty 'message'"}, status_code=400)
        session = session_of(request)
        return remember(JSONResponse(result_json(await session.send(message))), session)

    async def chat_stream(request: Request) -> Response:
        message = request.query_params.get("message", "")
        if not message.strip():
            return JSONResponse({"error": "give a non-empty 'message'"}, status_code=400)
        session = session_of(request)
        run = session.stream(message)

        async def events() -> AsyncIterator[str]:
            async with run:  # cancelled when the client leaves: the turn is aborted
                async for event in run:
                    yield sse(event)

        return remember(StreamingResponse(events(), media_type="text/event-stream"), session)

    async def approve(request: Request) -> Response:
        approval_id = request.path_params["approval_id"]
        try:
            pending = await agent.approvals.get(approval_id)
        except (ApprovalNotFoundError, InvalidSessionIdError):  # unknown, or not an id at all
            return JSONResponse({"error": "no such approval"}, status_code=404)
        if pending.session_id != request.cookies.get(COOKIE):
            return JSONResponse({"error": "no such approval"}, status_code=404)
        body = await request.json()
        result = await agent.approvals.resolve(approval_id, approved=bool(body.get("approved")))
        if result is None:
            return JSONResponse({"error": "nothing to continue"}, status_code=409)
        return JSONResponse(result_json(result))

    async def history(request: Request) -> Response:
        messages = await session_of(request).load()
        return JSONResponse([{"role": m.role, "text": m.text} for m in messages])

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await agent.aclose()

    return Starlette(
        routes=[
            Route("/chat", chat, methods=["POST"]),
            Route("/chat/stream", chat_stream),
            Route("/approvals/{approval_id}", approve, methods=["POST"]),
            Route("/history", history),
            Route("/health", health),
        ],
        lifespan=lifespan,
    )
