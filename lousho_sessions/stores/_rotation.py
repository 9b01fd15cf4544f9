"""``rotate_key``: rewrite every stored record to a store's current encryption key, in batches.

Each store lists its stored texts a batch at a time in key order (``fetch(after, limit)``)
and swaps old texts for new ones with a compare-and-set (``replace``): a record a turn
rewrote meanwhile is left as that turn wrote it (counted in ``skipped``; a turn of a
process that has the new keys writes with the current key anyway). Records are opened
and sealed again (``Sealing.reseal_message``, ``reseal_record``); what they hold does
not change, so no revision changes and no cache is invalidated. Without keys it writes
sealed records back in clear (what a store needs before it drops encryption).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ..errors import SessionBusyError
from ._sealing import Sealing, Value
from ._state_requests import is_state_key

__all__ = ["KINDS", "RotationResult", "rotate_files", "rotate_rows"]

log = logging.getLogger("lousho_sessions.stores")

#: What ``rotate_key`` rewrites, in this order.
KINDS = ("message", "checkpoint", "approval")
#: How many records ``rotate_key`` reads and rewrites at once by default.
BATCH = 500

Row = tuple[Any, str | None, Value]  # (key, session id, stored text or bytes)
Change = tuple[Any, Value, Value]  # (key, old value, new value)


@attrs.frozen
class RotationResult:
    """What ``rotate_key`` rewrote: messages, checkpoints and approval records, and how many
    it left because they changed while it ran (``skipped``: run it again)."""

    messages: int = 0
    checkpoints: int = 0
    approvals: int = 0
    skipped: int = 0

    def __add__(self, other: RotationResult) -> RotationResult:
        return RotationResult(
            self.messages + other.messages,
            self.checkpoints + other.checkpoints,
            self.approvals + other.approvals,
            self.skipped + other.skipped,
        )

    @property
    def total(self) -> int:
        return self.messages + self.checkpoints + self.approvals


def reseal(
    sealing: Sealing,
    kind: str,
    session_id: str | None,
    text: Value,
    source: str,
    *,
    as_text: bool = False,
) -> Value | None:
    """``text`` as ``sealing`` writes it now (a record as JSON text if ``as_text``); ``None``
    when it already is."""
    if kind == "message":
        assert session_id is not None
        return sealing.reseal_message(session_id, text, source=source)
    return sealing.reseal_record(kind, session_id, text, source=source, as_text=as_text)


def _reseal_text(
    sealing: Sealing, kind: str, session_id: str | None, text: str, source: str
) -> str | None:
    """``reseal`` for a store that keeps text (its sealing is not binary)."""
    new = reseal(sealing, kind, session_id, text, source)
    assert new is None or isinstance(new, str), "a text store's sealing writes text"
    return new


def rotate_rows(
    sealing: Sealing,
    where: str,
    fetch: Callable[[str, Any, int], Sequence[Row]],
    replace: Callable[[str, list[Change]], int],
    batch: int = BATCH,
    as_text: Callable[[str, Any], bool] | None = None,
) -> RotationResult:
    """Page through every kind with ``fetch(kind, after_key, limit)`` (``after_key`` ``None``
    first) and rewrite what is not current with ``replace(kind, changes)`` (returns how many
    it swapped); one batch at a time. ``as_text(kind, key)``: the records a binary store
    keeps as JSON text all the same (SQLite's state records)."""
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch!r}")
    counts = dict.fromkeys(KINDS, 0)
    skipped = 0
    for kind in KINDS:
        after: Any = None
        while True:
            rows = fetch(kind, after, batch)
            changes: list[Change] = []
            for key, session_id, text in rows:
                source = f"{where}: {kind} {key!r}" + (
                    f" of session {session_id!r}" if session_id else ""
                )
                text_form = as_text is not None and as_text(kind, key)
                new = reseal(sealing, kind, session_id, text, source, as_text=text_form)
                if new is not None:
                    changes.append((key, text, new))
            if changes:
                done = replace(kind, changes)
                counts[kind] += done
                skipped += len(changes) - done
            if len(rows) < batch:
                break
            after = rows[-1][0]
        log.info("%s: rotate_key rewrote %d %s records", where, counts[kind], kind)
    return RotationResult(counts["message"], counts["checkpoint"], counts["approval"], skipped)


def rotate_files(
    store: Any, parse_session: Callable[[Any, bytes], list[dict[str, Any]]], batch: int = BATCH
) -> RotationResult:
    """``rotate_key`` of a file store: each session file rewritten under its write lock, each
    checkpoint while its session's turn lock is free (a held one is ``skipped``), each
    approval under the approvals lock. ``parse_session(path, raw)``: the file store's reader
    of a session file (handed in: ``files`` imports this module)."""
    from .lease import fence_session_id

    sessions, checkpoints, approvals = store.sessions, store.checkpoints, store.approvals
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch!r}")
    messages = checkpoint_count = approval_count = skipped = 0
    for id in sessions.list_ids():
        path = sessions.path(id)
        with sessions._write_lock(id, path):
            raw = sessions._dir.read(path)
            if raw is None:
                continue
            texts = [json.dumps(d, separators=(",", ":")) for d in parse_session(path, raw)]
            new = [
                _reseal_text(sessions.sealing, "message", id, t, f"{path}: session {id!r}")
                for t in texts
            ]
            if any(n is not None for n in new):
                body = ",".join(t if n is None else n for t, n in zip(texts, new, strict=True))
                sessions._write(id, path, body, len(texts))
                messages += sum(n is not None for n in new)
    for turn_id in checkpoints.list():
        sid = fence_session_id(turn_id)
        path = checkpoints.path(turn_id)
        try:
            lease = sessions.turn_lock(sid, timeout=0)
        except SessionBusyError:  # a turn holds it: its checkpoint changes under us
            skipped += 1
            continue
        with lease:
            raw = checkpoints._dir.read(path)
            if raw is None:
                continue
            text = raw.decode("utf-8")
            new_text = _reseal_text(checkpoints.sealing, "checkpoint", sid, text, str(path))
            if new_text is not None:
                checkpoints._dir.write(path, new_text.encode("utf-8"))
                checkpoint_count += 1
    with approvals._lock():
        for name in approvals._dir.names(".approval.json"):
            path = approvals._dir.path / name
            raw = approvals._dir.read(path)
            if raw is None:
                continue
            text = raw.decode("utf-8")
            new_text = _reseal_text(approvals.sealing, "approval", None, text, str(path))
            if new_text is not None:
                approvals._dir.write(path, new_text.encode("utf-8"))
                approval_count += 1
    return RotationResult(messages, checkpoint_count, approval_count, skipped)


#: per kind: the table, its key columns, its text column, the session id column (SQLite)
_SQLITE = {
    "message": ("messages", ("session_id", "seq"), "json", "session_id"),
    "checkpoint": ("checkpoints", ("turn_id",), "json", None),
    "approval": ("approvals", ("id",), "json", None),
}


def _state_record(kind: str, key: Any) -> bool:
    """Whether a SQLite row is a state record: sealed as JSON text, not a BLOB (the commit
    and the fork read its version in SQL)."""
    return kind == "checkpoint" and is_state_key(str(key[0]))


def _session_of(kind: str, key: tuple[Any, ...], session_column: str | None) -> str | None:
    from .lease import fence_session_id

    if kind == "message":
        return str(key[0])
    if kind == "checkpoint":
        return fence_session_id(str(key[0]))
    return None  # an approval names its session inside


def rotate_sqlite(store: Any, batch: int = BATCH) -> RotationResult:
    """``rotate_key`` of a ``SqliteStore``: one transaction per batch, compare-and-set rows."""

    def fetch(kind: str, after: Any, limit: int) -> list[Row]:
        table, keys, column, sid = _SQLITE[kind]
        cols = ", ".join(keys)
        where = "" if after is None else f"WHERE ({cols}) > ({', '.join('?' * len(keys))}) "
        with store.connection() as conn:
            rows = conn.execute(
                f"SELECT {cols}, {column} FROM {table} {where}ORDER BY {cols} LIMIT ?",
                (*(after or ()), limit),
            ).fetchall()
        return [
            (tuple(r[: len(keys)]), _session_of(kind, tuple(r[: len(keys)]), sid), r[-1])
            for r in rows
        ]

    def replace(kind: str, changes: list[Change]) -> int:
        table, keys, column, _ = _SQLITE[kind]
        match = " AND ".join(f"{k} = ?" for k in keys)
        done = 0
        with store.transaction() as conn:
            for key, old, new in changes:
                done += conn.execute(
                    f"UPDATE {table} SET {column} = ? WHERE {match} AND {column} = ?",
                    (new, *key, old),
                ).rowcount
        return done

    with store.connection() as conn:  # old text is overwritten, not left in free pages
        (secure,) = conn.execute("PRAGMA secure_delete").fetchone()
        conn.execute("PRAGMA secure_delete = ON")
    try:
        result = rotate_rows(store.sealing, store.path, fetch, replace, batch, _state_record)
    finally:
        with store.connection() as conn:
            conn.execute(f"PRAGMA secure_delete = {int(secure)}")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # and not left in the WAL
    return result


#: per kind: the table, its key columns, its text column (PostgreSQL)
_POSTGRES = {
    "message": ("messages", ("session_id", "seq"), "body"),
    "checkpoint": ("checkpoints", ("turn_id",), "body"),
    "approval": ("approvals", ("id",), "body"),
}


def rotate_postgres(store: Any, batch: int = BATCH) -> RotationResult:
    """``rotate_key`` of a ``PostgresStore``: one transaction per batch; a row is swapped
    only if its text is still the one read (``body::text = old``)."""

    def fetch(kind: str, after: Any, limit: int) -> list[Row]:
        table, keys, column = _POSTGRES[kind]
        cols = ", ".join(f'{k} COLLATE "C"' if k != "seq" else k for k in keys)
        plain = ", ".join(keys)
        where = ""
        params: dict[str, Any] = {"limit": limit}
        if after is not None:
            marks = ", ".join(f"%(k{i})s" for i in range(len(keys)))
            where = f"WHERE ({cols}) > ({marks}) "
            params.update({f"k{i}": value for i, value in enumerate(after)})
        rows = store.fetch(
            f"SELECT {plain}, {column}::text FROM {{s}}.{table} {where}"
            f"ORDER BY {cols} LIMIT %(limit)s",
            params,
        )
        return [
            (tuple(r[: len(keys)]), _session_of(kind, tuple(r[: len(keys)]), None), r[-1])
            for r in rows
        ]

    def replace(kind: str, changes: list[Change]) -> int:
        table, keys, column = _POSTGRES[kind]
        match = " AND ".join(f"{k} = %(k{i})s" for i, k in enumerate(keys))
        done = 0
        with store.transaction() as conn:
            for key, old, new in changes:
                params = {"new": new, "old": old, **{f"k{i}": v for i, v in enumerate(key)}}
                cursor = store.run(
                    conn,
                    f"UPDATE {{s}}.{table} SET {column} = %(new)s::json "
                    f"WHERE {match} AND {column}::text = %(old)s",
                    params,
                )
                done += cursor.rowcount
        return done

    return rotate_rows(store.sealing, store.where, fetch, replace, batch)


#: Swap a list item (messages) or hash field (checkpoints, approvals) if it still holds ARGV[2].
_REDIS_SWAP = """
local current
if ARGV[1] == 'list' then current = redis.call('LINDEX', KEYS[1], ARGV[4])
else current = redis.call('HGET', KEYS[1], ARGV[4]) end
if current ~= ARGV[2] then return 0 end
if ARGV[1] == 'list' then redis.call('LSET', KEYS[1], ARGV[4], ARGV[3])
else redis.call('HSET', KEYS[1], ARGV[4], ARGV[3]) end
return 1
"""


def rotate_redis(store: Any, batch: int = BATCH) -> RotationResult:
    """``rotate_key`` of a ``RedisStore``: each record swapped by a script if unchanged
    (keys found with ``SCAN``; a batch is a page of one session's list or hash)."""
    swap = store.client.register_script(_REDIS_SWAP)
    parts = {"message": "messages", "checkpoint": "checkpoints", "approval": "approvals"}
    keys = {
        kind: sorted(set(store.scan(f"{store.prefix}:{{*}}:{part}")))
        for kind, part in parts.items()
    }

    def fetch(kind: str, after: Any, limit: int) -> list[Row]:
        # a record's key: (index of its Redis key, list position or hash field)
        index, mark = after if after is not None else (0, None)
        rows: list[Row] = []
        with store.call(f"rotate_key: read {kind} records") as client:
            while index < len(keys[kind]) and len(rows) < limit:
                key, need = keys[kind][index], limit - len(rows)
                if kind == "message":
                    first = 0 if mark is None else mark + 1
                    items = client.lrange(key, first, first + need - 1)
                    sid = store.session_of(key)
                    rows += [((index, first + i), sid, _text(v)) for i, v in enumerate(items)]
                    full = len(items) == need
                else:
                    fields = sorted(_text(f) for f in client.hkeys(key))
                    fields = [f for f in fields if mark is None or f > mark][:need]
                    values = client.hmget(key, fields) if fields else []
                    rows += [
                        ((index, f), _session_of(kind, (f,), None), _text(v))
                        for f, v in zip(fields, values, strict=True)
                        if v is not None
                    ]
                    full = len(fields) == need
                if full:
                    break
                index, mark = index + 1, None
        return rows

    def replace(kind: str, changes: list[Change]) -> int:
        done = 0
        with store.call(f"rotate_key: rewrite {kind} records") as client:
            for (index, target), old, new in changes:
                done += int(
                    swap(
                        keys=[keys[kind][index]],
                        args=["list" if kind == "message" else "hash", old, new, str(target)],
                        client=client,
                    )
                )
        return done

    return rotate_rows(store.sealing, store.where, fetch, replace, batch)


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
