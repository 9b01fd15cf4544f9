"""The five stores by kind for the conversation tests, openable again in another process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services_pg import drop_schema, postgres_url, require_postgres, schema_for
from services_redis import drop_prefix, prefix_for, redis_url, require_redis

from lousho_sessions import file_store, memory_store

KINDS = ("memory", "files", "sqlite", "postgres", "redis")
#: The stores another process can open.
SHARED = ("files", "sqlite", "postgres", "redis")


def open_store(kind: str, path: Path) -> Any:
    """The store of ``kind`` kept under (or named after) ``path``; the same one when called again."""
    if kind == "memory":
        return memory_store()
    if kind == "files":
        return file_store(path / "files")
    if kind == "sqlite":
        from lousho_sessions.sqlite import SqliteStore

        return SqliteStore(path / "agent.db")
    if kind == "postgres":
        from lousho_sessions.postgres import PostgresStore

        return PostgresStore(
            postgres_url(), schema=schema_for(path), min_size=1, max_size=4, lease_ttl=2.0
        )
    from lousho_sessions.redis import RedisStore

    return RedisStore(redis_url(), prefix=prefix_for(path), lease_ttl=2.0)


def require(kind: str) -> None:
    if kind == "postgres":
        require_postgres()
    elif kind == "redis":
        require_redis()


def cleanup(kind: str, path: Path) -> None:
    if kind == "postgres":
        drop_schema(schema_for(path))
    elif kind == "redis":
        drop_prefix(prefix_for(path))
