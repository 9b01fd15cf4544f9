"""The part of the kit a user fills in: how to make (and open again) the store under test."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..stores.base import BaseApprovalStore, BaseCheckpointStore, BaseSessionStore
from ._support import Parts, opened, skip


class KitBase:
    """``make_store`` (required) and ``reopen_store`` (for persistence and multi-process tests)."""

    def make_store(self, tmp_path: Path) -> Any:
        """A new, empty store keeping its data (if any) under ``tmp_path``.

        Return anything ``store_parts()`` accepts: an ``AgentStore``, a ``SqliteStore``,
        a mapping of parts, or a single ``SessionStore``.
        """
        raise NotImplementedError(f"{type(self).__name__} must define make_store(self, tmp_path)")

    def reopen_store(self, tmp_path: Path) -> Any:
        """The store ``make_store(tmp_path)`` made, opened again (possibly in another process).

        Not defined: the tests of persistence and of other processes are skipped.
        """
        skip(f"{type(self).__name__} defines no reopen_store(tmp_path): persistence not tested")

    @contextmanager
    def store(self, tmp_path: Path) -> Iterator[Parts]:
        with opened(self.make_store, tmp_path) as parts:
            yield parts

    @contextmanager
    def reopened(self, tmp_path: Path) -> Iterator[Parts]:
        with opened(self.reopen_store, tmp_path) as parts:
            yield parts


def need_sessions(parts: Parts) -> BaseSessionStore:
    """The sessions part, or skip: the store has none."""
    if parts.sessions is None:
        skip("the store has no sessions part: the session tests do not apply")
    return parts.sessions


def need_checkpoints(parts: Parts) -> BaseCheckpointStore:
    """The checkpoints part, or skip: the store has none."""
    if parts.checkpoints is None:
        skip("the store has no checkpoints part: the checkpoint tests do not apply")
    return parts.checkpoints


def need_approvals(parts: Parts) -> BaseApprovalStore:
    """The approvals part, or skip: the store has none."""
    if parts.approvals is None:
        skip("the store has no approvals part: the approval tests do not apply")
    return parts.approvals
