"""Redis stores: ``from lousho_sessions.redis import RedisStore`` (``pip install 'lousho-sessions[redis]'``).

A module of its own so that ``import lousho_sessions`` never imports ``redis``.
"""

from __future__ import annotations

from .stores._redis_records import RedisApprovalStore, RedisCheckpointStore
from .stores._redis_scripts import SESSION_PARTS
from .stores.base import PruneResult
from .stores.redis import RedisLease, RedisSessionStore, RedisStore

__all__ = [
    "SESSION_PARTS",
    "PruneResult",
    "RedisApprovalStore",
    "RedisCheckpointStore",
    "RedisLease",
    "RedisSessionStore",
    "RedisStore",
]
