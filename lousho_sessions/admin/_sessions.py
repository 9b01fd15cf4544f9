"""``lousho sessions list|show|export|rm|fork``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from ..errors import SessionBusyError, StoreConflictError
from ..messages import Usage
from ..stores._history_requests import fork_with_state
from ..stores.base import is_session_id
from ..usage_totals import USAGE_FIELDS
from ._context import Context
from ._data import EXPORT_FORMAT, dump_session, session_ids, turn_rows
from ._output import EXIT_FOUND, EXIT_OK, EXIT_USAGE, CommandError, Progress, iso, say, short

__all__ = ["register"]


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "sessions",
        help="list, show, export or delete sessions",
        description="List, show, export or delete stored sessions.",
    )
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    p = sub.add_parser(
        "list",
        parents=[common],
        help="every session: messages, tokens, cost, last write, pending turn",
        description="List every stored session (with a transcript, a checkpoint or an "
        "approval): its message count, the tokens and cost of its model calls, when it was "
        "last written and its pending turn.",
    )
    p.add_argument("--limit", type=int, metavar="N", help="show at most N sessions")
    p.set_defaults(run=list_sessions, read_only=True)

    p = sub.add_parser(
        "show",
        parents=[common],
        help="one session's messages, pending turns and approvals",
        description="Show one session: its messages, its unfinished turns and its approvals.",
    )
    p.add_argument("id", help="the session id")
    p.set_defaults(run=show_session, read_only=True)

    p = sub.add_parser(
        "export",
        parents=[common],
        help="sessions with their checkpoints and approvals, as JSON",
        description="Write sessions (all, or the ids given) as one JSON document: messages, "
        "checkpoints and approval records, exactly as stored.",
    )
    p.add_argument("ids", nargs="*", metavar="ID", help="the sessions to export (default: all)")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    p.set_defaults(run=export_sessions, read_only=True)

    p = sub.add_parser(
        "rm",
        parents=[common],
        help="delete sessions with their checkpoints and approvals",
        description="Delete sessions: transcript, checkpoints and approval records. A "
        "session whose turn is running (its lease is held) is left alone unless --force.",
    )
    p.add_argument("ids", nargs="+", metavar="ID", help="the sessions to delete")
    p.add_argument(
        "--force", action="store_true", help="delete even while a turn holds the session"
    )
    p.set_defaults(run=remove_sessions)

    p = sub.add_parser(
        "fork",
        parents=[common],
        help="a new session holding another's messages (all, or those before --at)",
        description="Create NEW_ID holding the messages of SOURCE before --at (an index, or "
        "a message id; default: all), in one store write. Refused if NEW_ID exists or a turn "
        "holds SOURCE. The new session names SOURCE as its parent.",
    )
    p.add_argument("source", help="the session to fork")
    p.add_argument("new_id", help="the new session's id")
    p.add_argument("--at", metavar="INDEX|MESSAGE_ID", help="keep the messages before this")
    p.set_defaults(run=fork_session)


def _check_id(id: str) -> str:
    if not is_session_id(id):
        raise CommandError(
            f"invalid session id {id!r}: letters, digits, '_' and '-', 1 to 128", EXIT_USAGE
        )
    return id


def list_sessions(ctx: Context) -> int:
    parts = ctx.parts
    ids = session_ids(parts)
    if ctx.args.limit is not None:
        ids = ids[: max(ctx.args.limit, 0)]
    pending = {row["session_id"]: row["status"] for row in turn_rows(parts)}
    approvals = Counter(str(r.get("session_id")) for r in parts.approvals.list(status="pending"))
    rows = []
    table = []
    for id in ids:
        info = parts.sessions.info(id)
        usage = parts.sessions.usage(id) if info is not None else None
        row = {
            "id": id,
            "messages": None if info is None else info.messages,
            "usage": _usage_json(usage),
            "updated_at": None if info is None else iso(info.updated_at),
            "pending_turn": pending.get(id),
            "pending_approvals": approvals.get(id, 0),
        }
        rows.append(row)
        shown = {**row, "tokens": _tokens(usage), "cost_usd": _cost(usage)}
        table.append(shown)
    columns = ["id", "messages", "tokens", "cost_usd", "updated_at", "pending_turn"]
    ctx.out.emit(rows, table, [*columns, "pending_approvals"])
    return EXIT_OK


def _usage_json(usage: Usage | None) -> dict[str, Any] | None:
    """Every field of ``usage``'s totals, for ``--json``."""
    return None if usage is None else {name: getattr(usage, name) for name in USAGE_FIELDS}


def _tokens(usage: Usage | None) -> str | None:
    """``in/out`` tokens, with the cached share of the input when there is one."""
    if usage is None:
        return None
    text = f"{usage.input_tokens}/{usage.output_tokens}"
    if usage.cache_read_tokens and usage.input_tokens:
        text += f" ({usage.cache_read_tokens / usage.input_tokens:.0%} cached)"
    return text


def _cost(usage: Usage | None) -> str | None:
    return None if usage is None else f"{usage.cost_usd:.4f}"


def show_session(ctx: Context) -> int:
    id = _check_id(ctx.args.id)
    parts = ctx.parts
    dump = dump_session(parts, id)
    turns = turn_rows(parts, session_id=id)
    if dump["messages"] is None and not dump["checkpoints"] and not dump["approvals"]:
        raise CommandError(f"no session {id!r} in {ctx.store.url}")
    info = parts.sessions.info(id)
    usage = parts.sessions.usage(id) if dump["messages"] is not None else None
    if ctx.out.as_json:
        ctx.out.json(
            {
                "id": id,
                "usage": _usage_json(usage),
                "updated_at": None if info is None else iso(info.updated_at),
                "messages": dump["messages"],
                "turns": turns,
                "approvals": dump["approvals"],
            }
        )
        return EXIT_OK
    out = ctx.out
    out.fields(
        [
            ("session", id),
            ("messages", 0 if dump["messages"] is None else len(dump["messages"])),
            ("tokens", _tokens(usage)),
            ("reasoning", None if usage is None else usage.reasoning_tokens),
            ("cache", None if usage is None else _cache_text(usage)),
            ("cost_usd", _cost(usage)),
            ("updated", None if info is None else iso(info.updated_at)),
        ]
    )
    out.line()
    rows = []
    for i, m in enumerate(dump["messages"] or []):
        text = "".join(p.get("text", "") for p in m.get("content", []) if isinstance(p, dict))
        calls = ", ".join(str(c.get("name")) for c in m.get("tool_calls", []) or [])
        rows.append(
            {"n": i, "role": m.get("role"), "text": short(text), "tool_calls": calls or None}
        )
    out.table(rows, ["n", "role", "text", "tool_calls"])
    out.line()
    out.line("Unfinished turns:")
    out.table(turns, ["turn_id", "status", "approval_id", "steps", "updated_at"])
    out.line()
    out.line("Approvals:")
    out.table(
        [
            {
                "id": r.get("id"),
                "tool": r.get("tool") or (r.get("call") or {}).get("name"),
                "status": r.get("status"),
                "created_at": r.get("created_at"),
            }
            for r in dump["approvals"]
        ],
        ["id", "tool", "status", "created_at"],
    )
    return EXIT_OK


def _cache_text(usage: Usage) -> str:
    return f"{usage.cache_read_tokens} read, {usage.cache_write_tokens} written"


def export_sessions(ctx: Context) -> int:
    output = None if not ctx.args.output else Path(ctx.args.output)
    if output is not None and not output.parent.is_dir():  # before reading every session
        raise CommandError(
            f"-o {str(output)!r}: the directory {str(output.parent)!r} does not exist",
            EXIT_USAGE,
        )
    parts = ctx.parts
    ids = [_check_id(i) for i in ctx.args.ids] or session_ids(parts)
    records = parts.approvals.list(status=None)
    sessions = []
    with Progress("export", len(ids)) as progress:
        for id in ids:
            sessions.append(dump_session(parts, id, records))
            progress.advance()
    document: dict[str, Any] = {"format": EXPORT_FORMAT, "version": 1, "sessions": sessions}
    if not ctx.args.ids:  # everything: approvals that name no session too
        document["approvals"] = sorted(
            (r for r in records if not is_session_id(r.get("session_id"))),
            key=lambda r: str(r.get("id")),
        )
    text = json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if output is not None:
        _write_private(output, text)
        say(f"exported {len(sessions)} sessions to {output}")
    else:
        ctx.out.stdout.write(text)
    return EXIT_OK


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (0600, as the stores keep
    transcripts), whole or not at all: a temporary file beside it, then renamed."""
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:  # mkstemp makes it 0600
            f.write(text)
        os.replace(temp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise CommandError(f"-o {str(path)!r}: cannot write it: {exc}", EXIT_USAGE) from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def remove_sessions(ctx: Context) -> int:
    parts = ctx.parts
    ids = [_check_id(i) for i in ctx.args.ids]
    known = set(session_ids(parts))
    results = []
    for id in ids:
        if id not in known:
            results.append({"id": id, "outcome": "missing"})
            continue
        lease = None
        try:
            if ctx.args.force:  # a running turn's writes are refused from now on
                fence = parts.sessions.take_over(id)
            else:
                lease = parts.sessions.turn_lock(id, timeout=0)
                fence = lease.fence
        except SessionBusyError:
            results.append({"id": id, "outcome": "busy"})
            continue
        try:
            for turn_id in parts.checkpoints.list(f"{id}."):
                parts.checkpoints.delete(turn_id, fence=fence)
            for record in parts.approvals.list(session_id=id, status=None):
                parts.approvals.delete(str(record["id"]))
            parts.sessions.delete(id)
        finally:
            if lease is not None:
                lease.release()
        results.append({"id": id, "outcome": "deleted"})
    ctx.out.emit(results, results, ["id", "outcome"])
    return EXIT_OK if all(r["outcome"] == "deleted" for r in results) else EXIT_FOUND


def fork_session(ctx: Context) -> int:
    parts = ctx.parts
    source, new_id = _check_id(ctx.args.source), _check_id(ctx.args.new_id)
    try:
        lease = parts.sessions.turn_lock(source, timeout=0)
    except SessionBusyError as exc:
        raise CommandError(f"session {source!r} is busy: a turn holds it ({exc})") from exc
    try:
        keep = _fork_point(ctx, source, ctx.args.at)
        done = fork_with_state(parts.sessions, source, new_id, keep, parts.checkpoints)
    except StoreConflictError as exc:
        raise CommandError(str(exc)) from exc
    finally:
        lease.release()
    row = {"id": new_id, "parent": source, "fork_point": done.messages, "messages": done.messages}
    ctx.out.emit(row, [row], ["id", "parent", "fork_point", "messages"])
    return EXIT_OK


def _fork_point(ctx: Context, source: str, at: str | None) -> int | None:
    """``--at`` as a message count: an index as given (negative: from the end), a message id
    looked up in the transcript; ``None`` without it."""
    if at is None:
        return None
    info = ctx.parts.sessions.info(source)
    if info is None:
        raise CommandError(f"no session {source!r} in {ctx.store.url}")
    try:
        index = int(at)
    except ValueError:
        messages = ctx.parts.sessions.load(source) or []
        for i, m in enumerate(messages):
            if m.id == at:
                return i
        raise CommandError(f"session {source!r} has no message with id {at!r}") from None
    keep = index if index >= 0 else info.messages + index
    if not 0 <= keep <= info.messages:
        raise CommandError(f"--at {at}: session {source!r} holds {info.messages} messages")
    return keep
