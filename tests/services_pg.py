"""The PostgreSQL server the Postgres tests use: where it is, and skipping (or failing) without it.

``LOUSHO_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``)
names the server. When it cannot be reached the tests skip, saying how to run
them, unless ``LOUSHO_REQUIRE_SERVICES=1`` (set by ``.ci/run``): then they fail.
Each test works in a schema of its own (``fresh_schema``), dropped afterwards.
"""

from __future__ import annotations

import functools
import hashlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
from helpers import skip_or_fail

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"

__all__ = [
    "DEFAULT_URL",
    "drop_schema",
    "fresh_schema",
    "postgres_url",
    "require_postgres",
    "schema_for",
]


def postgres_url() -> str:
    """The server's URL: ``LOUSHO_POSTGRES_URL`` or the default."""
    return os.environ.get("LOUSHO_POSTGRES_URL") or DEFAULT_URL


@functools.cache
def _unreachable() -> str | None:
    """Why the server cannot be reached, or ``None`` (checked once per process)."""
    try:
        with psycopg.connect(postgres_url(), connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def require_postgres() -> str:
    """The URL of a reachable server; skip (fail with ``LOUSHO_REQUIRE_SERVICES=1``) otherwise."""
    problem = _unreachable()
    if problem is None:
        return postgres_url()
    message = (
        f"PostgreSQL at {postgres_url()} is unreachable ({problem}). To run these tests start "
        "PostgreSQL 15+ (trust auth) or point LOUSHO_POSTGRES_URL at one, e.g. "
        "LOUSHO_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/test make test"
    )
    skip_or_fail(message)


def schema_for(path: Path | str) -> str:
    """A schema name derived from ``path`` (so another process finds the same one)."""
    return "t_" + hashlib.sha1(str(path).encode()).hexdigest()[:16]


def drop_schema(schema: str) -> None:
    """Drop ``schema`` and everything in it, if it exists."""
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def fresh_schema() -> Iterator[str]:
    """For a fixture: a new schema name on a reachable server, dropped afterwards."""
    require_postgres()
    schema = "t_" + secrets.token_hex(8)
    try:
        yield schema
    finally:
        drop_schema(schema)
