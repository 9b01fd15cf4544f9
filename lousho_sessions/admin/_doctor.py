"""``lousho doctor``: checks of a store's health, one row per check.

Every kind: unfinished and stale turns, orphaned checkpoints (behind the
transcript, or result records without their turn), pending approvals whose turn is
gone. Then per kind: SQLite's schema version, journal mode and lock files; the file
store's lock and temp files; PostgreSQL's schema version, leases and a connection
pooler in transaction mode (PgBouncer); Redis's server version, its
``maxmemory-policy`` (anything but ``noeviction`` fails), leases and unreadable
approval records. A check is ``ok``, ``warn`` (worth a look) or ``fail``
(breaks something); the exit code is 1 when any is not ``ok``.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any

from .. import recovery
from ..stores import _lockfile
from ..stores.base import is_session_id
from ..stores.lease import fence_session_id
from ._context import Context
from ._data import Parts, turn_rows
from ._output import EXIT_FOUND, EXIT_OK, parse_age

_MANY = 1_000_000

__all__ = ["register"]

_TURN = re.compile(r"^(?P<sid>[A-Za-z0-9_-]+)\.turn-(?P<n>\d+)$")
_RECORD = re.compile(r"^(?P<turn>[A-Za-z0-9_-]+\.turn-\d+)-r\d+-\d+$")

Check = dict[str, Any]


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "doctor",
        parents=[common],
        help="check the store: schema, WAL, locks, leases, pooler, orphans",
        description="Check the store's health: schema version, SQLite's WAL mode, lock "
        "files, live and expired leases, a PgBouncer-style pooler in transaction mode, "
        "stale turns, orphaned checkpoints and approvals. Exit 1 when a check is not ok.",
    )
    p.add_argument(
        "--stale-after",
        metavar="AGE",
        help="count a stale turn only once its checkpoint was not written for this long",
    )
    p.set_defaults(run=doctor, read_only=True)


def _check(name: str, status: str, detail: str) -> Check:
    return {"check": name, "status": status, "detail": detail}


def doctor(ctx: Context) -> int:
    store = ctx.store
    parts = ctx.parts
    checks = [_check("store", "ok", f"{store.kind} store {store.url}")]
    kind_checks = {
        "sqlite": _sqlite_checks,
        "file": _file_checks,
        "postgresql": _postgres_checks,
        "redis": _redis_checks,
    }.get(store.kind)
    if store.kind == "redis":  # doctor reports an evicting server instead of refusing it
        store.backend.check_server(refuse=False)
    if kind_checks is not None:
        live = set(parts.sessions.list_ids())
        live.update(fence_session_id(t) for t in parts.checkpoints.list(""))
        checks += kind_checks(store.backend, live)
    age = None if ctx.args.stale_after is None else parse_age(ctx.args.stale_after)
    checks += _content_checks(parts, age)
    ctx.out.emit(checks, checks, ["check", "status", "detail"])
    return EXIT_OK if all(c["status"] == "ok" for c in checks) else EXIT_FOUND


def _content_checks(parts: Parts, stale_after: float | None) -> list[Check]:
    checks = []
    ids = parts.sessions.list_ids()
    checks.append(_check("sessions", "ok", f"{len(ids)} stored"))
    rows = turn_rows(parts)
    stale = recovery.stale_turns(parts.store, limit=_MANY, older_than=stale_after)
    abandoned = [r for r in rows if r["status"] == "abandoned"]
    running = [r for r in rows if r["status"] == "running"]
    waiting = [r for r in rows if r["status"] == "awaiting-approval"]
    unreadable = [r for r in rows if r["status"] == "unreadable"]
    # paused on an approval that is decided, and nobody applies it: its resolver died
    stale_ids = {t.turn_id for t in stale}
    undone = [str(r["turn_id"]) for r in waiting if r["turn_id"] in stale_ids]
    checks.append(
        _check(
            "turns",
            "warn" if stale or abandoned or unreadable else "ok",
            f"{len(running)} running, {len(stale) - len(undone)} of them stale (no live "
            f"process holds them: `lousho sweep` finishes them), {len(abandoned)} abandoned "
            f"after repeated failures, {len(waiting)} awaiting approval"
            + (
                f", {len(unreadable)} unreadable ({_names([r['turn_id'] for r in unreadable])}: "
                "`lousho turns show ID` tells more, `lousho turns discard ID` removes one)"
                if unreadable
                else ""
            ),
        )
    )
    checks.append(
        _check(
            "decided approvals",
            "warn" if undone else "ok",
            f"{len(undone)} turns whose approval is decided but not applied (its process "
            "died, or it was resolved without --agent)"
            + (
                f" ({', '.join(undone[:3])}{', ...' if len(undone) > 3 else ''}: "
                "`lousho sweep --agent M:A` finishes them)"
                if undone
                else ""
            ),
        )
    )
    turn_ids = parts.checkpoints.list("")
    known = set(turn_ids)
    lengths: dict[str, int | None] = {}
    orphans = []
    for turn_id in turn_ids:
        record = _RECORD.match(turn_id)
        if record:
            if record.group("turn") not in known:
                orphans.append(turn_id)
            continue
        turn = _TURN.match(turn_id)
        if not turn:
            continue  # an agent.send() turn (<id>.send): not tied to a transcript
        sid = turn.group("sid")
        if sid not in lengths:
            info = parts.sessions.info(sid)
            lengths[sid] = None if info is None else info.messages
        length = lengths[sid]
        n = int(turn.group("n"))
        if (length is not None and n < length) or (length is None and n > 0):
            orphans.append(turn_id)
    checks.append(
        _check(
            "orphaned checkpoints",
            "warn" if orphans else "ok",
            f"{len(orphans)} behind their transcript or without their turn"
            + (
                f" ({', '.join(orphans[:3])}{', ...' if len(orphans) > 3 else ''}; "
                "`lousho prune` or `lousho turns discard` removes them)"
                if orphans
                else ""
            ),
        )
    )
    pending = parts.approvals.list(status="pending")
    lost = [
        str(r.get("id"))
        for r in pending
        if isinstance(r.get("turn_id"), str) and r["turn_id"] not in known
    ]
    checks.append(
        _check(
            "pending approvals",
            "warn" if lost else "ok",
            f"{len(pending)} pending, {len(lost)} whose turn checkpoint is gone"
            + (
                f" ({', '.join(lost[:3])}: deny them with `lousho approvals resolve ID --deny`)"
                if lost
                else ""
            ),
        )
    )
    return checks


def _names(ids: list[str]) -> str:
    """Up to three of ``ids``, for a detail."""
    return ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else "")


def _lock_file_check(directory: Path, live: set[str], name: str) -> list[Check]:
    try:
        names = [n for n in os.listdir(directory) if n.endswith(".lock")]
    except FileNotFoundError:
        return [_check(name, "ok", f"none ({directory} does not exist)")]
    held = leftover = 0
    for n in names:
        sid = n[: -len(".json.lock")] if n.endswith(".json.lock") else n[: -len(".lock")]
        is_held = _lockfile.is_held(directory / n)
        held += bool(is_held)
        if is_session_id(sid) and sid not in live and not is_held:
            leftover += 1
    return [
        _check(
            name,
            "warn" if leftover else "ok",
            f"{len(names)} in {directory}, {held} held by a running turn, {leftover} of "
            "deleted sessions" + (" (`lousho prune` removes them)" if leftover else ""),
        )
    ]


def _sqlite_checks(backend: Any, live: set[str]) -> list[Check]:
    from ..stores._sqlite_db import SCHEMA_VERSION

    with backend.connection() as conn:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        journal = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    checks = [
        _check(
            "schema version",
            "ok" if version == SCHEMA_VERSION else "fail",
            f"{version} (this release: {SCHEMA_VERSION})",
        )
    ]
    memory = backend.path == ":memory:"
    checks.append(
        _check(
            "journal mode",
            "ok" if journal == "wal" or memory else "warn",
            f"{journal}"
            + (
                ""
                if journal == "wal" or memory
                else ": expected WAL; several processes then block each other's reads"
            ),
        )
    )
    names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    checks.append(_check("synchronous", "ok", names.get(sync, str(sync))))
    if not memory:
        checks += _lock_file_check(Path(backend.path + ".locks"), live, "lock files")
    return checks


def _file_checks(backend: Any, live: set[str]) -> list[Check]:
    directory = Path(backend.sessions.dir)
    checks = _lock_file_check(directory, live, "lock files")
    try:
        temps = [n for n in os.listdir(directory) if n.startswith(".") and n.endswith(".tmp")]
    except FileNotFoundError:
        temps = []
    checks.append(
        _check(
            "temp files",
            "warn" if temps else "ok",
            f"{len(temps)} left by interrupted writes"
            + (" (`lousho prune` removes those of dead writers)" if temps else ""),
        )
    )
    return checks


def _postgres_checks(backend: Any, live: set[str]) -> list[Check]:
    from ..stores._postgres_schema import SCHEMA_VERSION

    with backend.connection() as conn:
        first = conn.execute("SELECT pg_backend_pid(), inet_server_port()").fetchone()
        second = conn.execute("SELECT pg_backend_pid()").fetchone()
        s = backend._s
        rows = conn.execute(f"SELECT coalesce(max(version), 0) FROM {s}.schema_version").fetchone()
        leases = conn.execute(
            f"SELECT count(*) FILTER (WHERE expires_at > now()), "
            f"count(*) FILTER (WHERE expires_at <= now() AND holder IS NOT NULL), count(*) "
            f"FROM {s}.leases"
        ).fetchone()
    version = int(rows[0])
    checks = [
        _check(
            "schema version",
            "ok" if version == SCHEMA_VERSION else "fail",
            f"{version} in schema {backend.schema!r} (this release: {SCHEMA_VERSION})",
        )
    ]
    held, expired, total = (int(v) for v in leases)
    checks.append(  # an expired lease is harmless (the next turn takes it over): the
        # turns check warns of the stale turn it may leave
        _check(
            "leases",
            "ok",
            f"{held} live, {expired} expired without release (their holder died; the next "
            f"turn takes them over), {total} sessions with a fence",
        )
    )
    pooled = first[0] != second[0]
    if pooled:
        status = "fail" if backend.notify else "ok"
        detail = (
            "statements of one connection reach different server processes: a pooler in "
            "transaction mode (PgBouncer)"
            + (": open with ?notify=false (LISTEN needs a session)" if backend.notify else "")
        )
    else:
        status = "ok"
        detail = (
            f"no transaction-mode pooler seen (server port {first[1]}); notify={backend.notify}"
        )
    checks.append(_check("pgbouncer", status, detail))
    return checks


def _redis_checks(backend: Any, live: set[str]) -> list[Check]:
    with backend.call("INFO") as client:
        info = client.info("server")
    version = str(info.get("redis_version", "?"))
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else 0
    checks = [
        _check(
            "server version",
            "ok" if major >= 6 else "fail",
            f"{version} (6 or newer needed)",
        )
    ]
    policy = backend.check_server(refuse=False)
    evicting = policy is not None and policy != "noeviction"
    checks.append(
        _check(
            "eviction",
            "fail" if evicting else "ok",
            "maxmemory-policy unknown (CONFIG is not allowed): make sure it is noeviction"
            if policy is None
            else f"maxmemory-policy {policy}"
            + (
                ": the server deletes keys under memory pressure (sessions lost or "
                "half-gone, leases gone under running turns); set noeviction, see "
                "docs/operations.md 'An evicting Redis'"
                if evicting
                else ""
            ),
        )
    )
    now = backend.server_time_us()
    held = expired = 0
    with backend.call("read leases") as client:
        for key in set(backend.scan(f"{backend.prefix}:{{*}}:lease")):
            holder, until = client.hmget(key, ["holder", "until"])
            if holder:
                if until is not None and float(until) > now:
                    held += 1
                else:
                    expired += 1
    checks.append(
        _check(
            "leases",
            "ok",
            f"{held} live, {expired} expired without release (their holder died; the next "
            "turn takes them over)",
        )
    )
    corrupt = backend.approvals.corrupt()
    checks.append(
        _check(
            "approval records",
            "warn" if corrupt else "ok",
            f"{len(corrupt)} unreadable" + (f": {sorted(corrupt)[:3]}" if corrupt else ""),
        )
    )
    checks.append(
        _check(
            "ttl",
            "ok",
            "none" if backend.ttl is None else f"{backend.ttl:.0f} s after the last write",
        )
    )
    return checks
