"""The PostgreSQL store's schema: versioned migrations, applied under a transaction-scoped lock.

Each entry of ``MIGRATIONS`` takes the schema one version up and runs in one
transaction holding ``pg_advisory_xact_lock`` on the schema's name, so any number
of processes may open a new database at once: the first applies the migration,
the others wait for its commit, read the new version and apply nothing. The lock
is released with the transaction, so nothing stays on the connection (PgBouncer
in transaction mode is fine). ``schema_version`` keeps one row per applied version.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from ..errors import SchemaVersionError
from ._postgres_state_sql import STATE_NUL_MIGRATION, state_migration

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "MIGRATIONS",
    "SCHEMA_PATTERN",
    "SCHEMA_VERSION",
    "migrate",
    "migration_sql",
    "quoted",
    "stored_version",
    "validate_schema",
]

log = logging.getLogger("lousho_sessions.stores.postgres")

#: Schema names: lowercase, so they need no quoting in a user's own SQL.
SCHEMA_PATTERN = r"^[a-z_][a-z0-9_]{0,47}$"
_SCHEMA = re.compile(SCHEMA_PATTERN)

#: ``acquire_saving`` as schema version 3 made it (version 5 changes one condition).
_ACQUIRE_SAVING_V3 = """CREATE FUNCTION {s}.acquire_saving(p_id text, p_holder text, p_ttl float8,
    p_revision bigint, p_turn_id text, p_body text,
    OUT o_fence bigint, OUT o_holder text, OUT o_remaining float8,
    OUT o_revision bigint, OUT o_checkpoints boolean, OUT o_saved boolean)
LANGUAGE plpgsql AS $$
BEGIN
    o_saved := false;
    INSERT INTO {s}.leases AS l (session_id, fence, holder, expires_at)
    VALUES (p_id, nextval('{s}.fences'), p_holder, now() + make_interval(secs => p_ttl))
    ON CONFLICT (session_id) DO UPDATE SET fence = excluded.fence,
        holder = excluded.holder, expires_at = excluded.expires_at
    WHERE l.expires_at IS NULL OR l.expires_at <= now()
    RETURNING l.fence INTO o_fence;
    IF o_fence IS NULL THEN
        SELECT l.holder, extract(epoch FROM l.expires_at - now())::float8
        INTO o_holder, o_remaining FROM {s}.leases l WHERE l.session_id = p_id;
        RETURN;
    END IF;
    SELECT s.revision INTO o_revision FROM {s}.sessions s WHERE s.id = p_id;
    o_checkpoints := EXISTS (SELECT 1 FROM {s}.checkpoints c
        WHERE split_part(c.turn_id, '.', 1) = p_id);
    IF p_turn_id IS NOT NULL AND NOT o_checkpoints
            AND o_revision IS NOT DISTINCT FROM p_revision THEN
        INSERT INTO {s}.checkpoints (turn_id, body, updated_at)
        VALUES (p_turn_id, ('{{"fence":' || o_fence || ',' || substr(p_body, 2))::json, now())
        ON CONFLICT (turn_id) DO NOTHING;
        o_saved := FOUND;
    END IF;
END
$$"""

#: ``(summary, statements)`` per version; ``{s}`` is the quoted schema name. Never edit an
#: entry once released: add one (tests/fixtures/postgres-v1.sql pins version 1).
MIGRATIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "1: sessions, messages as rows, checkpoints, approvals, leases with fences",
        (
            "CREATE SEQUENCE {s}.fences AS bigint",
            """CREATE TABLE {s}.sessions (
    id text PRIMARY KEY,
    length integer NOT NULL,
    revision bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
)""",
            """CREATE TABLE {s}.messages (
    session_id text NOT NULL,
    seq integer NOT NULL,
    body json NOT NULL,
    PRIMARY KEY (session_id, seq)
)""",
            """CREATE TABLE {s}.checkpoints (
    turn_id text PRIMARY KEY,
    body json NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
)""",
            """CREATE TABLE {s}.approvals (
    id text PRIMARY KEY,
    session_id text,
    status text NOT NULL,
    created_key text NOT NULL,
    body json NOT NULL,
    resolved_at timestamptz
)""",
            """CREATE TABLE {s}.leases (
    session_id text PRIMARY KEY,
    fence bigint NOT NULL,
    holder text,
    expires_at timestamptz
)""",
            "CREATE INDEX sessions_updated ON {s}.sessions (updated_at)",
            "CREATE INDEX checkpoints_updated ON {s}.checkpoints (updated_at)",
            "CREATE INDEX approvals_session ON {s}.approvals (session_id, status)",
            "CREATE INDEX approvals_resolved ON {s}.approvals (resolved_at)",
        ),
    ),
    (
        "2: functions for a turn's acquire, checkpoint, commit and release (plans cached)",
        (
            # PL/pgSQL keeps each statement's plan for the life of the backend, with no
            # client-side prepared statement: safe behind PgBouncer in transaction mode.
            # Checkpoints by session (a turn id is its session id, ".", the rest): for acquire.
            "CREATE INDEX checkpoints_session ON {s}.checkpoints ((split_part(turn_id, '.', 1)))",
            # A lease taken also returns the session's revision and whether it has any
            # checkpoint, read after the lease is the newest (one round trip for a turn's
            # first look; no checkpoint: no pending turn to finish).
            """CREATE FUNCTION {s}.acquire(p_id text, p_holder text, p_ttl float8,
    OUT o_fence bigint, OUT o_holder text, OUT o_remaining float8,
    OUT o_revision bigint, OUT o_checkpoints boolean)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {s}.leases AS l (session_id, fence, holder, expires_at)
    VALUES (p_id, nextval('{s}.fences'), p_holder, now() + make_interval(secs => p_ttl))
    ON CONFLICT (session_id) DO UPDATE SET fence = excluded.fence,
        holder = excluded.holder, expires_at = excluded.expires_at
    WHERE l.expires_at IS NULL OR l.expires_at <= now()
    RETURNING l.fence INTO o_fence;
    IF o_fence IS NULL THEN
        SELECT l.holder, extract(epoch FROM l.expires_at - now())::float8
        INTO o_holder, o_remaining FROM {s}.leases l WHERE l.session_id = p_id;
    ELSE
        SELECT s.revision INTO o_revision FROM {s}.sessions s WHERE s.id = p_id;
        o_checkpoints := EXISTS (SELECT 1 FROM {s}.checkpoints c
            WHERE split_part(c.turn_id, '.', 1) = p_id);
    END IF;
END
$$""",
            # The fenced, length-checked append of a turn's messages, deleting the turn's
            # checkpoints p_delete; with p_release (the store's NOTIFY channel) it also frees
            # the lease of p_fence in the same transaction. FOR SHARE on the lease row makes a
            # concurrent acquire wait for this commit: the write lands before a newer fence
            # is handed out, or is refused.
            """CREATE FUNCTION {s}.append(p_sid text, p_fence bigint, p_expected integer,
    p_rev bigint, p_bodies json[], p_delete text[], p_release text,
    OUT o_written boolean, OUT o_fenced boolean, OUT o_length integer)
LANGUAGE plpgsql AS $$
DECLARE
    newest bigint;
    added integer := coalesce(cardinality(p_bodies), 0);
BEGIN
    o_written := false;
    o_fenced := true;
    IF p_fence IS NOT NULL THEN
        SELECT l.fence INTO newest FROM {s}.leases l WHERE l.session_id = p_sid FOR SHARE;
        IF newest > p_fence THEN
            o_fenced := false;
            SELECT s.length INTO o_length FROM {s}.sessions s WHERE s.id = p_sid;
            RETURN;
        END IF;
    END IF;
    IF p_expected = 0 THEN
        INSERT INTO {s}.sessions AS t (id, length, revision, updated_at)
        VALUES (p_sid, added, p_rev, now())
        ON CONFLICT (id) DO UPDATE SET length = excluded.length,
            revision = excluded.revision, updated_at = now()
        WHERE t.length = 0;
    ELSE
        UPDATE {s}.sessions SET length = p_expected + added, revision = p_rev,
            updated_at = now()
        WHERE id = p_sid AND length = p_expected;
    END IF;
    IF NOT FOUND THEN
        SELECT s.length INTO o_length FROM {s}.sessions s WHERE s.id = p_sid;
        RETURN;
    END IF;
    INSERT INTO {s}.messages (session_id, seq, body)
    SELECT p_sid, p_expected + u.seq - 1, u.body
    FROM unnest(p_bodies) WITH ORDINALITY AS u(body, seq)
    ON CONFLICT (session_id, seq) DO UPDATE SET body = excluded.body;
    IF cardinality(p_delete) > 0 THEN
        DELETE FROM {s}.checkpoints WHERE turn_id = ANY(p_delete);
    END IF;
    IF p_release IS NOT NULL AND p_fence IS NOT NULL THEN
        UPDATE {s}.leases SET expires_at = NULL, holder = NULL
        WHERE session_id = p_sid AND fence = p_fence;
        IF FOUND THEN
            PERFORM pg_notify(p_release, p_sid);
        END IF;
    END IF;
    o_written := true;
    o_length := p_expected + added;
END
$$""",
            # A turn's checkpoint, written only under the newest fence (FOR SHARE as above).
            """CREATE FUNCTION {s}.save_checkpoint(p_sid text, p_fence bigint, p_id text,
    p_body json, OUT o_fenced boolean)
LANGUAGE plpgsql AS $$
DECLARE
    newest bigint;
BEGIN
    IF p_fence IS NOT NULL THEN
        SELECT l.fence INTO newest FROM {s}.leases l WHERE l.session_id = p_sid FOR SHARE;
        IF newest > p_fence THEN
            o_fenced := false;
            RETURN;
        END IF;
    END IF;
    INSERT INTO {s}.checkpoints (turn_id, body, updated_at) VALUES (p_id, p_body, now())
    ON CONFLICT (turn_id) DO UPDATE SET body = excluded.body, updated_at = now();
    o_fenced := true;
END
$$""",
            # Free the lease of p_fence and wake the waiters. Its transaction is not flushed
            # before it returns (synchronous_commit off for it alone): a release lost in a
            # server crash only leaves the lease to run out.
            """CREATE FUNCTION {s}.release(p_id text, p_fence bigint, p_channel text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    UPDATE {s}.leases SET expires_at = NULL, holder = NULL
    WHERE session_id = p_id AND fence = p_fence;
    IF FOUND THEN
        PERFORM pg_notify(p_channel, p_id);
    END IF;
END
$$""",
        ),
    ),
    (
        "3: a turn's lease taken with its first checkpoint; messages appended as one JSON array",
        (
            # acquire (v2), and once the lease is taken: if the session's revision is still
            # p_revision (the one the checkpoint was built on) and it has no checkpoint, the
            # turn's first checkpoint p_body (a JSON object without "fence", given as text)
            # is stored under p_turn_id with the new fence, in the same transaction: a turn
            # is then durable from the round trip that takes its lease. ON CONFLICT: a
            # checkpoint written meanwhile without a fence is left alone (not saved).
            _ACQUIRE_SAVING_V3,
            # append (v2) with the messages as one JSON array (p_bodies), each element
            # stored as its own row, text unchanged: cheaper to send than an array of json.
            """CREATE FUNCTION {s}.append_turn(p_sid text, p_fence bigint, p_expected integer,
    p_rev bigint, p_bodies json, p_delete text[], p_release text,
    OUT o_written boolean, OUT o_fenced boolean, OUT o_length integer)
LANGUAGE plpgsql AS $$
DECLARE
    newest bigint;
    added integer := json_array_length(p_bodies);
BEGIN
    o_written := false;
    o_fenced := true;
    IF p_fence IS NOT NULL THEN
        SELECT l.fence INTO newest FROM {s}.leases l WHERE l.session_id = p_sid FOR SHARE;
        IF newest > p_fence THEN
            o_fenced := false;
            SELECT s.length INTO o_length FROM {s}.sessions s WHERE s.id = p_sid;
            RETURN;
        END IF;
    END IF;
    IF p_expected = 0 THEN
        INSERT INTO {s}.sessions AS t (id, length, revision, updated_at)
        VALUES (p_sid, added, p_rev, now())
        ON CONFLICT (id) DO UPDATE SET length = excluded.length,
            revision = excluded.revision, updated_at = now()
        WHERE t.length = 0;
    ELSE
        UPDATE {s}.sessions SET length = p_expected + added, revision = p_rev,
            updated_at = now()
        WHERE id = p_sid AND length = p_expected;
    END IF;
    IF NOT FOUND THEN
        SELECT s.length INTO o_length FROM {s}.sessions s WHERE s.id = p_sid;
        RETURN;
    END IF;
    INSERT INTO {s}.messages (session_id, seq, body)
    SELECT p_sid, p_expected + u.seq - 1, u.body
    FROM json_array_elements(p_bodies) WITH ORDINALITY AS u(body, seq)
    ON CONFLICT (session_id, seq) DO UPDATE SET body = excluded.body;
    IF cardinality(p_delete) > 0 THEN
        DELETE FROM {s}.checkpoints WHERE turn_id = ANY(p_delete);
    END IF;
    IF p_release IS NOT NULL AND p_fence IS NOT NULL THEN
        UPDATE {s}.leases SET expires_at = NULL, holder = NULL
        WHERE session_id = p_sid AND fence = p_fence;
        IF FOUND THEN
            PERFORM pg_notify(p_release, p_sid);
        END IF;
    END IF;
    o_written := true;
    o_length := p_expected + added;
END
$$""",
        ),
    ),
    (
        "4: sessions name the session they were forked from and the fork point",
        ("ALTER TABLE {s}.sessions ADD COLUMN parent text, ADD COLUMN fork_point integer",),
    ),
    state_migration(_ACQUIRE_SAVING_V3),
    STATE_NUL_MIGRATION,
)
SCHEMA_VERSION = len(MIGRATIONS)

_VERSION_TABLE = """CREATE TABLE IF NOT EXISTS {s}.schema_version (
    version integer PRIMARY KEY,
    summary text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""


def validate_schema(schema: object) -> str:
    """``schema`` if it matches ``SCHEMA_PATTERN``, else ``ValueError``."""
    if isinstance(schema, str) and _SCHEMA.fullmatch(schema):
        return schema
    raise ValueError(
        f"invalid schema name {schema!r}: it must match {SCHEMA_PATTERN} "
        "(lowercase letters, digits and '_', up to 48 characters)"
    )


def quoted(schema: str) -> str:
    """The schema name as an SQL identifier (validated, so quoting is enough)."""
    return '"' + validate_schema(schema) + '"'


def migration_sql(schema: str = "lousho", *, since: int = 0) -> str:
    """The SQL taking ``schema`` from version ``since`` to ``SCHEMA_VERSION``, as a script.

    For users who migrate with their own tools: run it once, then open the store
    with ``migrate=False``. Each version is one transaction.
    """
    s = quoted(schema)
    if not 0 <= since <= SCHEMA_VERSION:
        raise ValueError(f"since must be between 0 and {SCHEMA_VERSION}, got {since!r}")
    lines = [
        f"-- lousho_sessions PostgreSQL schema {schema!r}, versions {since} to {SCHEMA_VERSION}"
    ]
    for number, (summary, statements) in enumerate(MIGRATIONS[since:], since + 1):
        lines += ["", f"-- version {summary}", "BEGIN;"]
        if number == 1:
            lines += [f"CREATE SCHEMA IF NOT EXISTS {s};", _VERSION_TABLE.format(s=s) + ";"]
        lines += [statement.format(s=s) + ";" for statement in statements]
        summary_literal = summary.replace("'", "''")
        lines += [
            f"INSERT INTO {s}.schema_version (version, summary) VALUES ({number}, '{summary_literal}');",
            "COMMIT;",
        ]
    return "\n".join(lines) + "\n"


def stored_version(conn: psycopg.Connection[Any], schema: str) -> int:
    """The schema's version in the database: 0 when it has no ``schema_version`` table."""
    s = quoted(schema)
    # A query of the catalog tables, not to_regclass(): that one may answer from a cache
    # not yet told of a table another process created while this one waited for the lock.
    row = conn.execute(
        "SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
        "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = 'schema_version'",
        (schema,),
    ).fetchone()
    if row is None:
        return 0
    row = conn.execute(f"SELECT coalesce(max(version), 0) FROM {s}.schema_version").fetchone()
    return int(row[0]) if row else 0


def check_version(version: int, schema: str, where: str) -> None:
    """``SchemaVersionError`` for a schema written by a newer release."""
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{where}: schema {schema!r} is at version {version}, written by a newer "
            f"lousho_sessions; this release reads versions up to {SCHEMA_VERSION}"
        )


def migrate(conn: psycopg.Connection[Any], schema: str, *, where: str) -> int:
    """Bring ``schema`` to ``SCHEMA_VERSION``, one transaction per version; the versions applied.

    ``conn`` is in autocommit mode. Reads the version first without a lock (the
    common case: nothing to do), then, per missing version, takes the schema's
    advisory lock, reads the version again and applies the migration if still missing.
    """
    version = stored_version(conn, schema)
    check_version(version, schema, where)
    applied = 0
    s = quoted(schema)
    while version < SCHEMA_VERSION:
        with conn.transaction():
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext('lousho_sessions.migrate'), hashtext(%s))",
                (schema,),
            )
            version = stored_version(conn, schema)
            check_version(version, schema, where)
            if version >= SCHEMA_VERSION:
                break
            summary, statements = MIGRATIONS[version]
            log.info("%s: migrating schema %r to version %s", where, schema, summary)
            if version == 0:
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
                conn.execute(_VERSION_TABLE.format(s=s))
            for statement in statements:
                conn.execute(statement.format(s=s))
            conn.execute(
                f"INSERT INTO {s}.schema_version (version, summary) VALUES (%s, %s)",
                (version + 1, summary),
            )
            version += 1
            applied += 1
    return applied
