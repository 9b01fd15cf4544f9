"""SQLite stores: ``from lousho_sessions.sqlite import SqliteStore``.

A module of its own so that ``import lousho_sessions`` never imports ``sqlite3``.
"""

from __future__ import annotations

from .stores.base import PruneResult
from .stores.sqlite import (
    MIGRATIONS,
    SCHEMA_VERSION,
    SqliteApprovalStore,
    SqliteCheckpointStore,
    SqliteSessionStore,
    SqliteStore,
)

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "PruneResult",
    "SqliteApprovalStore",
    "SqliteCheckpointStore",
    "SqliteSessionStore",
    "SqliteStore",
]
