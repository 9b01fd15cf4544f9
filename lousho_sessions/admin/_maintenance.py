"""``lousho prune``, ``lousho sweep`` and ``lousho migrate``."""

from __future__ import annotations

import argparse
import time
from typing import Any

import attrs

from ..errors import LoushoError
from ..stores.base import is_session_id
from ..stores.urls import URLStore
from ._context import Context, open_url
from ._data import Parts, checksum, dump_session, epoch_of, session_ids, turn_rows
from ._output import EXIT_FOUND, EXIT_OK, CommandError, Progress, parse_age
from ._turns import result_json

__all__ = ["register"]


def register(
    commands: Any, common: argparse.ArgumentParser, agent: argparse.ArgumentParser
) -> None:
    p = commands.add_parser(
        "prune",
        parents=[common],
        help="delete what was not written for a while",
        description="Delete sessions and checkpoints not written within --older-than, "
        "approvals resolved that long ago (pending ones stay), and leftover lock and temp "
        "files. Ages: 3600 (seconds), 30m, 12h, 7d, 2w, 1h30m.",
    )
    p.add_argument("--older-than", required=True, help="e.g. 30d")
    p.set_defaults(run=prune)

    p = commands.add_parser(
        "sweep",
        parents=[common, agent],
        help="finish the turns whose process died",
        description="Find running turns whose checkpoint was not written for --older-than "
        "(their process probably died) and finish each with --agent. --dry-run only lists "
        "them. Exit 1 when a turn could not be finished.",
    )
    p.add_argument("--dry-run", action="store_true", help="list the turns, run nothing")
    p.add_argument("--older-than", default="5m", help="age of the last checkpoint (5m)")
    p.add_argument("--limit", type=int, default=100, help="at most this many turns (100)")
    p.set_defaults(run=sweep)

    p = commands.add_parser(
        "migrate",
        help="copy every session, checkpoint and approval to another store",
        description="Copy sessions (transcripts), checkpoints and approval records from "
        "--from to --to, then verify the copy: the counts and a checksum (SHA-256) of the "
        "content, "
        "read back from both stores, must match (exit 1 if not). Stop the workers using "
        "--from first: turns that run during the copy may be missed. The destination must "
        "hold none of the sessions unless --force. Leases and fences are not copied.",
    )
    p.add_argument("--from", dest="source", required=True, metavar="URL", help="the store to read")
    p.add_argument("--to", dest="target", required=True, metavar="URL", help="the store to write")
    p.add_argument(
        "--force", action="store_true", help="overwrite sessions the destination holds already"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=migrate)


def prune(ctx: Context) -> int:
    seconds = parse_age(ctx.args.older_than)
    store = ctx.store
    with Progress("prune", 1) as progress:
        result = store.prune(seconds)
        progress.advance()
    body = attrs.asdict(result)
    if ctx.out.as_json:
        ctx.out.json({"older_than_seconds": seconds, **body})
    else:
        ctx.out.fields([(k.replace("_", " "), v) for k, v in body.items()])
    return EXIT_OK


def sweep(ctx: Context) -> int:
    args = ctx.args
    cutoff = time.time() - parse_age(args.older_than)
    stale = [
        r
        for r in turn_rows(ctx.parts)
        if r["status"] == "running" and (epoch_of(r.get("updated_at")) or 0) < cutoff
    ][: max(args.limit, 0)]
    columns = ["turn_id", "outcome", "finish_reason", "error"]
    if args.dry_run:
        rows = [{**r, "outcome": "would resume"} for r in stale]
        ctx.out.emit(rows, rows, ["turn_id", "outcome", "steps", "updated_at"])
        return EXIT_OK
    agent = ctx.agent(required=True)
    rows = []
    with Progress("sweep", len(stale)) as progress:
        for r in stale:
            session = agent.session(r["session_id"], store=ctx.store)
            try:
                pending = session.pending()
                if pending is None or pending.turn_id != r["turn_id"]:
                    row = {"turn_id": r["turn_id"], "outcome": "gone", "result": None}
                else:
                    result = result_json(session.resume())
                    row = {
                        "turn_id": r["turn_id"],
                        "outcome": "resumed",
                        "finish_reason": None if result is None else result["finish_reason"],
                        "result": result,
                    }
            except LoushoError as exc:
                row = {"turn_id": r["turn_id"], "outcome": "failed", "error": str(exc)}
            finally:
                session.close()
            rows.append(row)
            progress.advance()
    ctx.out.emit(rows, rows, columns)
    return EXIT_FOUND if any(r["outcome"] == "failed" for r in rows) else EXIT_OK


@attrs.frozen
class _Side:
    sessions: int
    messages: int
    checkpoints: int
    approvals: int
    checksum: str


def _read(parts: Parts, ids: list[str], label: str) -> tuple[_Side, list[dict[str, Any]]]:
    records = parts.approvals.list(status=None)
    dumps = []
    with Progress(label, len(ids)) as progress:
        for id in ids:
            dumps.append(dump_session(parts, id, records))
            progress.advance()
    loose = sorted(
        (r for r in records if not is_session_id(r.get("session_id"))),
        key=lambda r: str(r.get("id")),
    )
    all_dumps = [*dumps, {"id": "", "approvals": loose}]
    side = _Side(
        sessions=sum(d["messages"] is not None for d in dumps),
        messages=sum(len(d["messages"] or []) for d in dumps),
        checkpoints=sum(len(d["checkpoints"]) for d in dumps),
        approvals=sum(len(d["approvals"]) for d in dumps) + len(loose),
        checksum=checksum(all_dumps),
    )
    return side, all_dumps


def _write(target: Parts, dumps: list[dict[str, Any]], force: bool) -> None:
    with Progress("copy", len(dumps)) as progress:
        for dump in dumps:
            id = dump["id"]
            if id:
                _write_session(target, dump, force)
            for record in dump["approvals"]:
                if force:
                    target.approvals.delete(str(record["id"]))
                target.approvals.create(record)
            progress.advance()


def _write_session(target: Parts, dump: dict[str, Any], force: bool) -> None:
    from ..serde import message_from_dict

    id = dump["id"]
    if force:
        for record in target.approvals.list(session_id=id, status=None):
            target.approvals.delete(str(record["id"]))
        for turn_id in target.checkpoints.list(f"{id}."):
            target.checkpoints.delete(turn_id)
        target.sessions.delete(id)
    if dump["messages"] is not None:
        target.sessions.save(id, [message_from_dict(m) for m in dump["messages"]])
    for turn_id, data in sorted(dump["checkpoints"].items()):
        target.checkpoints.save(turn_id, data)


def migrate(ctx: Context) -> int:
    args = ctx.args
    source: URLStore = open_url(args.source, "--from")
    try:
        target: URLStore = open_url(args.target, "--to")
    except BaseException:
        source.close()
        raise
    try:
        return _migrate(ctx, Parts(source), Parts(target), source, target)
    finally:
        target.close()
        source.close()


def _migrate(ctx: Context, src: Parts, dst: Parts, source: URLStore, target: URLStore) -> int:
    if source.url == target.url:
        raise CommandError(f"--from and --to are the same store ({source.url})")
    ids = session_ids(src)
    taken = sorted(set(ids) & set(session_ids(dst)))
    if taken and not ctx.args.force:
        raise CommandError(
            f"{target.url} holds {len(taken)} of the sessions already ({', '.join(taken[:5])}"
            f"{', ...' if len(taken) > 5 else ''}); nothing was copied. Use --force to "
            "overwrite them."
        )
    before, dumps = _read(src, ids, "read")
    _write(dst, dumps, ctx.args.force)
    after, _ = _read(dst, ids, "verify")
    same = after == before
    body = {
        "from": source.url,
        "to": target.url,
        "source": attrs.asdict(before),
        "target": attrs.asdict(after),
        "verified": same,
    }
    if ctx.out.as_json:
        ctx.out.json(body)
    else:
        rows = [
            {"part": name, "source": getattr(before, name), "target": getattr(after, name)}
            for name in ("sessions", "messages", "checkpoints", "approvals", "checksum")
        ]
        ctx.out.table(rows, ["part", "source", "target"])
        ctx.out.line("verified: the copy matches" if same else "MISMATCH: the copy differs")
    if not same:
        raise CommandError(
            f"migrate: the copy in {target.url} does not match {source.url} (see above)"
        )
    return EXIT_OK
