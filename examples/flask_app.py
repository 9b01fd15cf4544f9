"""A Flask chat app: one session per browser, streamed replies, human approval of a tool.

- ``POST /chat`` ``{"message": "..."}``: one turn of the session named by the
  ``lousho_session`` cookie (set on the first request).
- ``GET /chat/stream?message=...``: the same turn as server-sent events, one
  ``event: <type>`` per stream event; a client that disconnects aborts the turn.
- ``POST /approvals/<id>`` ``{"approved": true}``: decide a paused tool call of
  this browser's session and continue the turn; ``POST /approvals/<id>/stream``
  does the same and streams the continued turn as server-sent events (409 when
  another request decided first).
- ``GET /history``: the transcript.

Views are plain blocking functions: ``session.send()`` runs the turn on the
session's worker thread and returns its result. With ``LOUSHO_DB=chat.db`` the
app keeps sessions in one SQLite file, so several worker processes can serve it::

    LOUSHO_DB=chat.db gunicorn -w 4 -k gthread --threads 8 --timeout 120 \
        -b 127.0.0.1:8000 'flask_app:create_app()'

(``gthread``: an open stream holds a thread, not a whole process, and is not killed
by ``--timeout``, which would cut a ``sync`` worker's turn longer than it; see
docs/integrations.md.) A tampered session cookie is answered with 400.

Without it, sessions live in memory (one process). The model is the offline demo
model unless ``agent`` is given; try "My name is Ali.", "What is my name?" and
"Refund order 'A-17'." (the refund waits for approval).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

from flask import Flask, Response, abort, jsonify, request

from lousho_sessions import (
    Agent,
    AgentRun,
    ApprovalAlreadyResolvedError,
    ApprovalNotFoundError,
    Event,
    ExecutionResult,
    InvalidSessionIdError,
    Session,
    create_agent,
    memory_store,
    tool,
)

COOKIE = "lousho_session"


@tool(needs_approval=True)
def refund_order(order_id: str) -> str:
    """Refund an order in full."""
    return f"order {order_id} refunded"


def default_store() -> Any:
    """One SQLite file shared by every worker process (``LOUSHO_DB``), else memory."""
    path = os.environ.get("LOUSHO_DB")
    if path:
        from lousho_sessions.sqlite import SqliteStore

        return SqliteStore(path)
    return memory_store()


def result_json(result: ExecutionResult) -> dict[str, Any]:
    return {
        "text": result.text,
        "finish_reason": result.finish_reason,
        "approval_id": result.approval_id,
        "session_id": result.session_id,
        "pid": os.getpid(),
    }


def event_json(event: Event) -> dict[str, Any]:
    if event.type == "text.delta":
        return {"text": event.text}
    if event.type == "approval.requested":
        return {"approval_id": event.approval_id, "tool": event.call.name}
    if event.type == "run.done":
        return {"finish_reason": event.finish_reason}
    if event.type == "error":
        return {"error": str(event.error)}
    return {}


def create_app(agent: Agent | None = None) -> Flask:
    app = Flask(__name__)
    agent = agent or create_agent(
        instructions="You are a shop assistant.", tools=[refund_order], store=default_store()
    )

    def current_session() -> tuple[Session, bool]:
        """The cookie's session, and whether the cookie is new; 400 for a tampered cookie."""
        session_id = request.cookies.get(COOKIE)
        if not session_id:
            return agent.session(str(uuid.uuid4())), True
        try:  # the cookie is client input: the SDK refuses ids that are not plain names
            return agent.session(session_id), False
        except InvalidSessionIdError:
            abort(400, f"invalid {COOKIE} cookie; delete it to start a new conversation")

    def with_cookie(response: Response, session: Session, new: bool) -> Response:
        if new:
            response.set_cookie(COOKIE, session.id, httponly=True, samesite="Lax")
        return response

    def message() -> str:
        data = request.get_json(silent=True) or {}
        text = data.get("message") if request.method == "POST" else request.args.get("message")
        if not isinstance(text, str) or not text.strip():
            abort(400, "send a non-empty 'message'")
        return text

    @app.post("/chat")
    def chat() -> Response:
        text = message()
        session, new = current_session()
        return with_cookie(jsonify(result_json(session.send(text))), session, new)

    def event_stream(run: AgentRun) -> Response:
        def events() -> Iterator[str]:
            with run:  # the server closes this generator if the client leaves: abort
                for event in run:
                    yield f"event: {event.type}\ndata: {json.dumps(event_json(event))}\n\n"

        response = Response(events(), mimetype="text/event-stream")
        response.headers["Cache-Control"] = "no-cache"
        response.headers["X-Accel-Buffering"] = "no"  # a proxy (nginx) must not buffer it
        return response

    @app.get("/chat/stream")
    def chat_stream() -> Response:
        text = message()
        session, new = current_session()
        run = session.stream(text)  # queued now; the generator in event_stream only reads it
        return with_cookie(event_stream(run), session, new)

    def decision(approval_id: str) -> bool:
        """``approved`` from the body; 404 unless the approval is this browser's session's."""
        session_id = request.cookies.get(COOKIE)
        try:
            pending = agent.approvals.get(approval_id)
        except (ApprovalNotFoundError, InvalidSessionIdError):  # unknown, or not an id at all
            abort(404)
        if pending.session_id != session_id:  # only the session's own browser decides
            abort(404)
        return bool((request.get_json(silent=True) or {}).get("approved"))

    @app.post("/approvals/<approval_id>")
    def approve(approval_id: str) -> Response:
        approved = decision(approval_id)
        try:
            result = agent.approvals.resolve(approval_id, approved=approved)
        except ApprovalAlreadyResolvedError:
            abort(409, "this approval was decided already")
        if result is None:
            abort(409, "nothing to continue")
        return jsonify(result_json(result))

    @app.post("/approvals/<approval_id>/stream")
    def approve_stream(approval_id: str) -> Response:
        approved = decision(approval_id)
        try:  # decided here, before the response starts: a losing request gets 409
            run = agent.approvals.resolve_stream(approval_id, approved=approved)
        except ApprovalAlreadyResolvedError:
            abort(409, "this approval was decided already")
        return event_stream(run)

    @app.get("/history")
    def history() -> Response:
        session, new = current_session()
        messages = [{"role": m.role, "text": m.text} for m in session.load()]
        return with_cookie(jsonify(messages), session, new)

    return app


if __name__ == "__main__":
    create_app().run(debug=True)
