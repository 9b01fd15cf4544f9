"""Versions 5 and 6 of the PostgreSQL schema (``_postgres_schema.MIGRATIONS``): a session's
state written, copied and left out where a turn looks for checkpoints, each in one statement.

A session's state is its ``<id>.state`` row of the ``checkpoints`` table (the store
contract's default place): ``{"state": {...}, "version": n}``, sealed like a checkpoint
when the store encrypts (``"version"`` stays in clear). Apart from ``_postgres_schema`` to
keep that module short; ``{s}`` is the quoted schema name (``str.format``: braces doubled).
"""

from __future__ import annotations

__all__ = ["STATE_NUL_MIGRATION", "state_migration"]

#: ``commit_turn`` as schema version 5 made it (version 6 reads the stored version otherwise).
_COMMIT_TURN_V5 = """CREATE FUNCTION {s}.commit_turn(p_sid text, p_fence bigint, p_expected integer,
    p_rev bigint, p_bodies json, p_delete text[], p_release text, p_state json,
    OUT o_written boolean, OUT o_fenced boolean, OUT o_length integer)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT a.o_written, a.o_fenced, a.o_length INTO o_written, o_fenced, o_length
    FROM {s}.append_turn(p_sid, p_fence, p_expected, p_rev, p_bodies, p_delete, p_release) a;
    IF o_written AND p_state IS NOT NULL THEN
        INSERT INTO {s}.checkpoints AS c (turn_id, body, updated_at)
        VALUES (p_sid || '.state', {s}.state_versioned(p_state, 1), now())
        ON CONFLICT (turn_id) DO UPDATE SET updated_at = now(), body = {s}.state_versioned(
            p_state, coalesce((c.body->>'version')::bigint, 0) + 1);
    END IF;
END
$$"""


def state_migration(acquire_saving_v3: str) -> tuple[str, tuple[str, ...]]:
    """``(summary, statements)`` of schema version 5, from version 3's ``acquire_saving``."""
    return (
        "5: a turn's state committed with its messages; a state record is no pending turn",
        (
            # A state record (a JSON object) with its "version" set to p_version, written last;
            # its other fields kept in order and as they are (a sealed token, the state).
            """CREATE FUNCTION {s}.state_versioned(p_body json, p_version bigint) RETURNS json
LANGUAGE sql IMMUTABLE AS $$
SELECT ('{{' || coalesce(string_agg(to_json(e.k)::text || ':' || e.v::text, ',' ORDER BY e.n)
    || ',', '') || '"version":' || p_version || '}}')::json
FROM json_each(p_body) WITH ORDINALITY AS e(k, v, n) WHERE e.k <> 'version'
$$""",
            # acquire_saving (v3), but a session's state record is not a checkpoint: a session
            # with state and no unfinished turn still has its first checkpoint saved with the lease.
            acquire_saving_v3.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION").replace(
                "= p_id);", "= p_id AND c.turn_id <> p_id || '.state');"
            ),
            # append_turn (v3), then, if it wrote and p_state is given (the state record without
            # its version), the session's state at the version after the stored one: a turn's
            # messages and state land together, or neither does.
            _COMMIT_TURN_V5,
        ),
    )


#: ``(summary, statements)`` of schema version 6. Version 5 read a state record's version with
#: ``->>`` and rebuilt the record with ``json_each``: both parse the whole body and refuse a
#: ``\u0000`` escape anywhere in it ("cannot be converted to text"), so a state holding a
#: U+0000 failed a fork and a commit changing it. Both now work on the record's text, which
#: PostgreSQL keeps as written: every writer puts ``"version"`` last (``with_version``, the
#: default's ``{"state": ..., "version": n}``, a sealed record's clear fields after its token).
STATE_NUL_MIGRATION: tuple[str, tuple[str, ...]] = (
    "6: a state record's version read and written on its text (a U+0000 in state is kept)",
    (
        # the version of a state record: its last member (NULL if it has none there)
        """CREATE FUNCTION {s}.state_version(p_body json) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
SELECT substring(rtrim(p_body::text) FROM '"version"\\s*:\\s*(-?[0-9]+)\\s*\\}}$')::bigint
$$""",
        # the record with its last member "version" (if any) replaced by p_version
        """CREATE OR REPLACE FUNCTION {s}.state_versioned(p_body json, p_version bigint)
RETURNS json LANGUAGE sql IMMUTABLE AS $$
SELECT (CASE WHEN t ~ '^\\{{\\s*\\}}$' THEN '{{' ELSE left(t, -1) || ',' END
    || '"version":' || p_version || '}}')::json
FROM (SELECT regexp_replace(regexp_replace(rtrim(p_body::text),
    ',\\s*"version"\\s*:\\s*-?[0-9]+\\s*\\}}$', '}}'),
    '^\\{{\\s*"version"\\s*:\\s*-?[0-9]+\\s*\\}}$', '{{}}') AS t) x
$$""",
        # commit_turn (v5), the stored version read by state_version
        _COMMIT_TURN_V5.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION").replace(
            "(c.body->>'version')::bigint", "{s}.state_version(c.body)"
        ),
    ),
)
