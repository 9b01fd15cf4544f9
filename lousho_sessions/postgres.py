"""PostgreSQL stores: ``from lousho_sessions.postgres import PostgresStore``.

A module of its own so that ``import lousho_sessions`` never imports psycopg
(install the ``postgres`` extra: ``pip install 'lousho-sessions[postgres]'``).
"""

from __future__ import annotations

from .stores.base import PruneResult
from .stores.postgres import (
    MIGRATIONS,
    SCHEMA_VERSION,
    PostgresApprovalStore,
    PostgresCheckpointStore,
    PostgresSessionStore,
    PostgresStore,
    migration_sql,
)

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "PostgresApprovalStore",
    "PostgresCheckpointStore",
    "PostgresSessionStore",
    "PostgresStore",
    "PruneResult",
    "migration_sql",
]
