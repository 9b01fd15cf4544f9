"""``lousho turns list|show|resume|discard`` and ``lousho approvals list|resolve``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .. import recovery
from ..approvals import decide
from ..errors import (
    ApprovalAlreadyResolvedError,
    ApprovalDecisionError,
    ApprovalNotFoundError,
    LoushoError,
    SessionAwaitingApprovalError,
    ToolArgumentsError,
)
from ..recovery import SweptTurn, stale_turns
from ..results import ExecutionResult
from ..stores.base import TURN_ID_PATTERN, validate_turn_id
from ..stores.lease import fence_session_id
from ._context import Context
from ._data import turn_row, turn_rows
from ._output import EXIT_FOUND, EXIT_OK, EXIT_USAGE, CommandError, parse_age

__all__ = ["OK_OUTCOMES", "register", "result_json", "swept_json"]

_STATUSES = ("running", "awaiting-approval", "abandoned")
_APPROVAL_STATUSES = ("pending", "approved", "denied", "all")


def register(
    commands: Any, common: argparse.ArgumentParser, agent: argparse.ArgumentParser
) -> None:
    parser = commands.add_parser(
        "turns",
        help="list, show, resume or discard unfinished turns",
        description="Unfinished durable turns: the checkpoints of turns that were running "
        "when their process stopped, or that wait on an approval.",
    )
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    p = sub.add_parser(
        "list",
        parents=[common],
        help="unfinished turns, by status, or the stale ones",
        description="List unfinished turns. --stale: only the running turns no live "
        "process holds (their OS lock is free, their lease expired): their process died, "
        "and `lousho sweep` finishes them; --older-than keeps those not written for that "
        "long. Status abandoned: turns a sweep gave up on after --max-attempts claims.",
    )
    p.add_argument("--status", choices=_STATUSES, help="only turns with this status")
    p.add_argument("--session", help="only this session's turns")
    p.add_argument("--stale", action="store_true", help="only running turns no live process holds")
    p.add_argument(
        "--older-than",
        metavar="AGE",
        help="with --stale: only those not written for this long (e.g. 5m)",
    )
    p.set_defaults(run=list_turns)

    p = sub.add_parser(
        "show",
        parents=[common],
        help="one turn's checkpoint",
        description="Show one unfinished turn: status, steps, its new messages and tool results.",
    )
    p.add_argument("turn_id", help=f"the turn id (<session id>.turn-<n>, {TURN_ID_PATTERN})")
    p.set_defaults(run=show_turn)

    p = sub.add_parser(
        "resume",
        parents=[common, agent],
        help="finish an unfinished turn with your agent",
        description="Finish an unfinished turn with the agent --agent names: recorded tool "
        "results and model responses are not made again. A running turn is claimed as "
        "`sweep` claims it (refused, exit 1, while a live process holds it); an approved or "
        "abandoned one is resumed as its session's resume() would. Ctrl-C aborts the turn, "
        "which stays pending with what finished.",
    )
    p.add_argument("turn_id", help="the turn id (<session id>.turn-<n>)")
    p.set_defaults(run=resume_turn)

    p = sub.add_parser(
        "discard",
        parents=[common],
        help="drop an unfinished turn without running it",
        description="Drop an unfinished turn (its checkpoint, its result records and the "
        "approval it waits on) without running it; the transcript stays as it was before it.",
    )
    p.add_argument("turn_id", help="the turn id (<session id>.turn-<n>)")
    p.set_defaults(run=discard_turn)

    parser = commands.add_parser(
        "approvals",
        help="list or resolve approvals",
        description="Approval records of tool calls that need a human decision.",
    )
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = sub.add_parser(
        "list",
        parents=[common],
        help="approvals, pending by default",
        description="List approval records (pending ones unless --status says otherwise).",
    )
    p.add_argument("--status", choices=_APPROVAL_STATUSES, default="pending")
    p.add_argument("--session", help="only this session's approvals")
    p.set_defaults(run=list_approvals)

    p = sub.add_parser(
        "resolve",
        parents=[common, agent],
        help="approve or deny a pending approval",
        description="Approve or deny a pending approval. The decision is recorded in the "
        "store; the paused turn goes on at the session's next resume() or send(), or now "
        "when --agent is given.",
    )
    p.add_argument("id", help="the approval id")
    decision = p.add_mutually_exclusive_group(required=True)
    decision.add_argument("--approve", action="store_true", help="let the tool call run")
    decision.add_argument("--deny", action="store_true", help="refuse it (the model is told)")
    p.add_argument("--reason", help="why (kept in the record)")
    p.add_argument(
        "--arguments",
        metavar="JSON",
        help="with --approve and --agent: a JSON object replacing the call's arguments, "
        "checked against the tool's schema of --agent's tool; the tool runs with them",
    )
    p.set_defaults(run=resolve_approval)


def result_json(result: ExecutionResult | None) -> dict[str, Any] | None:
    """What the command shows of a turn's result."""
    if result is None:
        return None
    return {
        "finish_reason": result.finish_reason,
        "text": result.text,
        "approval_id": result.approval_id,
        "steps": result.steps,
        "session_id": result.session_id,
    }


def _turn_id(value: str) -> str:
    try:
        return validate_turn_id(value)
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None


def list_turns(ctx: Context) -> int:
    args = ctx.args
    if args.stale:
        older = None if args.older_than is None else parse_age(args.older_than)
        stale = {t.turn_id for t in stale_turns(ctx.store, limit=1_000_000, older_than=older)}
        rows = [r for r in turn_rows(ctx.parts, session_id=args.session) if r["turn_id"] in stale]
    else:
        rows = turn_rows(ctx.parts, session_id=args.session)
    if args.status:
        rows = [r for r in rows if r["status"] == args.status]
    ctx.out.emit(
        rows,
        rows,
        ["turn_id", "status", "approval_id", "steps", "attempts", "new_messages", "updated_at"],
    )
    return EXIT_OK


def show_turn(ctx: Context) -> int:
    turn_id = _turn_id(ctx.args.turn_id)
    data = ctx.parts.checkpoints.load(turn_id)
    row = turn_row(turn_id, data)
    if data is None or row is None:
        raise CommandError(f"no unfinished turn {turn_id!r} in {ctx.store.url}")
    records = [k for k in ctx.parts.checkpoints.list(f"{turn_id}-r")]
    if ctx.out.as_json:
        ctx.out.json({**row, "records": records, "checkpoint": data})
        return EXIT_OK
    ctx.out.fields([(k.replace("_", " "), v) for k, v in row.items()])
    results = data.get("results") if isinstance(data.get("results"), dict) else {}
    ctx.out.fields([("tool results", len(results or {})), ("result records", len(records))])
    ctx.out.line()
    messages = data.get("new") if isinstance(data.get("new"), list) else []
    ctx.out.table(
        [
            {
                "role": m.get("role"),
                "text": "".join(
                    p.get("text", "") for p in m.get("content", []) if isinstance(p, dict)
                ),
                "tool_calls": ", ".join(str(c.get("name")) for c in m.get("tool_calls") or []),
            }
            for m in messages or []
            if isinstance(m, dict)
        ],
        ["role", "text", "tool_calls"],
    )
    return EXIT_OK


def _pending_of(ctx: Context, turn_id: str) -> str:
    """The session of ``turn_id``, if that turn is the session's pending one; else exit 1."""
    if ctx.parts.checkpoints.load(turn_id) is None:
        raise CommandError(f"no unfinished turn {turn_id!r} in {ctx.store.url}")
    return fence_session_id(turn_id)


def swept_json(swept: SweptTurn) -> dict[str, Any]:
    """What the command shows of a turn ``recovery`` claimed."""
    result = result_json(swept.result)
    return {
        "turn_id": swept.turn_id,
        "session_id": swept.session_id,
        "outcome": swept.outcome,
        "attempts": swept.attempts,
        "finish_reason": None if result is None else result["finish_reason"],
        "result": result,
        "error": None if swept.error is None else f"{type(swept.error).__name__}: {swept.error}",
    }


#: What ``recovery`` calls a claim that ended well: the turn finished, or paused on an approval.
OK_OUTCOMES = ("finished", "parked")


def resume_turn(ctx: Context) -> int:
    turn_id = _turn_id(ctx.args.turn_id)
    session_id = _pending_of(ctx, turn_id)
    agent = ctx.agent(required=True)
    data = ctx.parts.checkpoints.load(turn_id) or {}
    if data.get("status", "running") == "running":
        body = swept_json(recovery.resume_turn(ctx.store, turn_id, agent=agent))
    else:  # approved (or still waiting: refused), or abandoned: as the session resumes it
        session = agent.session(session_id, store=ctx.store)
        try:
            pending = session.pending()
            if pending is None or pending.turn_id != turn_id:
                raise CommandError(
                    f"turn {turn_id!r} is not session {session_id!r}'s pending turn "
                    f"(that is {None if pending is None else pending.turn_id!r}); a checkpoint "
                    "behind the transcript is left over: `lousho doctor` lists it"
                )
            try:
                result = result_json(session.resume())
            except SessionAwaitingApprovalError as exc:
                raise CommandError(str(exc)) from exc
        finally:
            session.close()
        finished = result is not None and result["finish_reason"] != "awaiting-approval"
        body = {
            "turn_id": turn_id,
            "session_id": session_id,
            "outcome": "finished" if finished else "parked",
            "finish_reason": None if result is None else result["finish_reason"],
            "result": result,
            "error": None,
        }
    if ctx.out.as_json:
        ctx.out.json(body)
    else:
        r = body["result"] or {}
        ctx.out.fields(
            [
                ("turn", turn_id),
                ("outcome", body["outcome"]),
                ("finish reason", r.get("finish_reason")),
                ("text", r.get("text")),
                ("error", body.get("error")),
            ]
        )
    return EXIT_OK if body["outcome"] in OK_OUTCOMES else EXIT_FOUND


def discard_turn(ctx: Context) -> int:
    turn_id = _turn_id(ctx.args.turn_id)
    session_id = _pending_of(ctx, turn_id)
    session = ctx.agent(required=False).session(session_id, store=ctx.store)
    try:
        pending = session.pending()
        if pending is not None and pending.turn_id == turn_id:
            session.discard_pending()
        else:  # left behind the transcript: no turn will load it again
            ctx.parts.checkpoints.delete(turn_id)
            for key in ctx.parts.checkpoints.list(f"{turn_id}-r"):
                ctx.parts.checkpoints.delete(key)
    finally:
        session.close()
    body = {"turn_id": turn_id, "discarded": True}
    if ctx.out.as_json:
        ctx.out.json(body)
    else:
        ctx.out.line(f"discarded {turn_id}")
    return EXIT_OK


def list_approvals(ctx: Context) -> int:
    status = None if ctx.args.status == "all" else ctx.args.status
    records = ctx.parts.approvals.list(session_id=ctx.args.session, status=status)
    rows = [
        {
            "id": r.get("id"),
            "session_id": r.get("session_id"),
            "tool": r.get("tool") or (r.get("call") or {}).get("name"),
            "status": r.get("status"),
            "created_at": r.get("created_at"),
            "resolved_at": r.get("resolved_at"),
        }
        for r in records
    ]
    ctx.out.emit(records, rows, ["id", "session_id", "tool", "status", "created_at"])
    return EXIT_OK


def _edited_arguments(ctx: Context) -> dict[str, Any] | None:
    """The ``--arguments`` JSON object (None without it); a usage error naming what is wrong."""
    args = ctx.args
    if args.arguments is None:
        return None
    if not args.approve:
        raise CommandError(
            "--arguments replaces the arguments of an approved call: give --approve", EXIT_USAGE
        )
    if not args.agent:
        raise CommandError(
            "--arguments needs --agent: the arguments are checked against the schema of "
            "your agent's tool before anything is recorded",
            EXIT_USAGE,
        )
    try:
        value = json.loads(args.arguments)
    except ValueError as exc:
        raise CommandError(f"--arguments is not valid JSON: {exc}", EXIT_USAGE) from None
    if not isinstance(value, dict):
        raise CommandError(
            f"--arguments must be a JSON object, not {type(value).__name__}", EXIT_USAGE
        )
    return value


def resolve_approval(ctx: Context) -> int:
    args = ctx.args
    arguments = _edited_arguments(ctx)
    agent = ctx.agent(required=True) if args.agent else None
    try:
        record = decide(
            ctx.parts.approvals,
            agent.tools if agent is not None else {},
            args.id,
            approved=bool(args.approve),
            reason=args.reason,
            arguments=arguments,
        )
    except ApprovalNotFoundError:
        raise CommandError(f"no approval {args.id!r} in {ctx.store.url}") from None
    except ApprovalAlreadyResolvedError as exc:
        raise CommandError(str(exc)) from None
    except (ToolArgumentsError, ApprovalDecisionError) as exc:  # nothing was recorded
        raise CommandError(f"{type(exc).__name__}: {exc}", EXIT_USAGE) from None
    resumed = None
    session_id = record.get("session_id")
    if agent is not None and isinstance(session_id, str):
        session = agent.session(session_id, store=ctx.store)
        try:
            resumed = result_json(session.resume())
        except LoushoError as exc:
            raise CommandError(
                f"approval {args.id!r} is {record.get('status')}, but: {exc}"
            ) from exc
        finally:
            session.close()
    body = {"id": args.id, "status": record.get("status"), "resumed": resumed}
    if arguments is not None:
        body["arguments"] = record.get("arguments")
    if ctx.out.as_json:
        ctx.out.json(body)
    else:
        ctx.out.line(f"approval {args.id} {record.get('status')}")
        if resumed is not None:
            ctx.out.line(f"turn finished: {resumed['finish_reason']}: {resumed['text']}")
    return EXIT_OK if record.get("status") else EXIT_FOUND
