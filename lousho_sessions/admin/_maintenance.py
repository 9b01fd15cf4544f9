"""``lousho prune``, ``lousho sweep`` and ``lousho migrate``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import attrs

from .. import recovery
from ..agent import Agent
from ..recovery import SweptTurn
from ..stores.base import is_session_id
from ..stores.urls import URLStore
from . import _sweeper
from ._context import Context, open_url
from ._data import Parts, checksum, dump_session, session_ids
from ._output import EXIT_FOUND, EXIT_OK, CommandError, Progress, parse_age, say
from ._turns import OK_OUTCOMES, swept_json

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
    p.add_argument("--older-than", required=True, metavar="AGE", help="e.g. 30d")
    p.set_defaults(run=prune)

    p = commands.add_parser(
        "sweep",
        parents=[common, agent],
        help="finish the turns whose process died",
        description="Claim the running turns no live process holds (their OS lock is free, "
        "their lease expired: their process died) and finish each with --agent, as "
        "lousho_sessions.recovery.sweep does: several sweepers may run at once, each turn is "
        "claimed by one. A turn claimed --max-attempts times is marked abandoned and kept. "
        "--dry-run only lists them; --every N sweeps again every N seconds until SIGTERM or "
        "Ctrl-C. Exit 1 when a turn failed or was abandoned.",
    )
    p.add_argument("--dry-run", action="store_true", help="list the turns, claim nothing")
    p.add_argument(
        "--older-than",
        metavar="AGE",
        help="only turns whose checkpoint was not written for this long (e.g. 5m)",
    )
    p.add_argument(
        "--limit", type=int, default=100, metavar="N", help="at most N turns a sweep (100)"
    )
    p.add_argument(
        "--max-attempts",
        type=int,
        default=3,
        metavar="N",
        help="claims before a turn is abandoned (3)",
    )
    p.add_argument(
        "--every", type=float, metavar="SECONDS", help="sweep again every SECONDS, until stopped"
    )
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
    p.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print JSON instead of a table",
    )
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
    older = None if args.older_than is None else parse_age(args.older_than)
    columns = ["turn_id", "outcome", "attempts", "finish_reason", "error"]
    if args.dry_run:
        stale = recovery.stale_turns(ctx.store, limit=args.limit, older_than=older)
        rows = [
            {
                "turn_id": t.turn_id,
                "session_id": t.session_id,
                "outcome": "would resume",
                "attempts": t.attempts,
                "fence": t.fence,
                "updated_at": None if t.updated_at is None else t.updated_at.isoformat(),
            }
            for t in stale
        ]
        ctx.out.emit(rows, rows, ["turn_id", "outcome", "attempts", "updated_at"])
        return EXIT_OK
    agent = ctx.agent(required=True)
    if args.every is not None:
        return _sweep_forever(ctx, agent, older)
    stale = recovery.stale_turns(ctx.store, limit=args.limit, older_than=older)
    rows = []
    # each claim as recovery.sweep makes it (fenced: another sweeper's turn is "taken"),
    # several at once, so the bar can count them as they end
    with Progress("sweep", len(stale)) as progress, ThreadPoolExecutor(8) as pool:
        futures = [
            pool.submit(
                recovery.resume_turn,
                ctx.store,
                t.turn_id,
                agent=agent,
                fence=t.fence,
                max_attempts=args.max_attempts,
            )
            for t in stale
        ]
        for future in as_completed(futures):
            rows.append(swept_json(future.result()))
            progress.advance()
    rows.sort(key=lambda r: str(r["turn_id"]))
    ctx.out.emit(rows, rows, columns)
    return EXIT_OK if all(r["outcome"] in (*OK_OUTCOMES, "taken") for r in rows) else EXIT_FOUND


def _sweep_forever(ctx: Context, agent: Agent, older: float | None) -> int:
    """``sweep --every``: ``run_sweeper`` until SIGTERM/SIGINT; a line (or JSON line) per turn."""
    args = ctx.args
    if args.every <= 0:
        raise CommandError(f"--every must be a positive number of seconds, got {args.every}", 2)

    done: Counter[str] = Counter()

    def report(turn: SweptTurn) -> None:
        done[turn.outcome] += 1
        row = swept_json(turn)
        if ctx.out.as_json:
            ctx.out.stdout.write(json.dumps(row, sort_keys=True, default=str) + "\n")
        else:
            ctx.out.line(f"{row['turn_id']}  {row['outcome']}  attempts={row['attempts']}")
        ctx.out.stdout.flush()

    stop = threading.Event()

    def stopping() -> None:
        if stop.wait():
            say(
                "lousho sweep: stopping after the sweep in progress (a second signal stops at once)"
            )

    threading.Thread(target=stopping, name="lousho-sweep-stopping", daemon=True).start()
    try:
        totals = _sweeper.run_sweeper(
            ctx.store,
            agent=agent,
            every=args.every,
            limit=args.limit,
            older_than=older,
            max_attempts=args.max_attempts,
            on_swept=report,
            stop=stop,
        )
    except KeyboardInterrupt:
        # a second SIGTERM/SIGINT: stop now. The turns in progress run in worker threads
        # nothing can stop, and the interpreter would wait for them at exit: leave them
        # to their leases (the next sweep takes them over) and exit at once.
        say(
            f"lousho sweep: stopped at once by a second signal; finished before it: "
            f"{dict(sorted(done.items())) or 'none'}; the turns in progress are left to the "
            "next sweep (their leases run out)"
        )
        ctx.out.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    summary = {**attrs.asdict(totals), "swept": totals.swept}
    say(f"lousho sweep: stopped: {summary}")
    return EXIT_OK


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
    source: URLStore = open_url(args.source, "--from", must_exist=True)
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
