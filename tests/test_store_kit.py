"""The conformance kit (``lousho_sessions.testing``) run over every store of ours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lousho_sessions import file_store, memory_store
from lousho_sessions.sqlite import SqliteStore
from lousho_sessions.testing import (
    StoreContractTests,
    approval_store_machine,
    checkpoint_store_machine,
    session_store_machine,
)


class TestMemoryStore(StoreContractTests):
    def make_store(self, tmp_path: Path) -> Any:
        return memory_store()


class TestFileStore(StoreContractTests):
    def make_store(self, tmp_path: Path) -> Any:
        return file_store(tmp_path / "store")

    def reopen_store(self, tmp_path: Path) -> Any:
        return file_store(tmp_path / "store")


class TestSqliteStore(StoreContractTests):
    def make_store(self, tmp_path: Path) -> Any:
        return SqliteStore(tmp_path / "store.db")

    def reopen_store(self, tmp_path: Path) -> Any:
        return SqliteStore(tmp_path / "store.db")


class TestSqliteMemoryStore(StoreContractTests):
    def make_store(self, tmp_path: Path) -> Any:
        return SqliteStore(":memory:")


def memory(path: Path) -> Any:
    return memory_store()


def files(path: Path) -> Any:
    return file_store(path)


def sqlite(path: Path) -> Any:
    return SqliteStore(path / "store.db")


def sqlite_memory(path: Path) -> Any:
    return SqliteStore(":memory:")


TestMemorySessions = session_store_machine(memory).TestCase
TestMemoryCheckpoints = checkpoint_store_machine(memory).TestCase
TestMemoryApprovals = approval_store_machine(memory).TestCase
TestFileSessions = session_store_machine(files).TestCase
TestFileCheckpoints = checkpoint_store_machine(files).TestCase
TestFileApprovals = approval_store_machine(files).TestCase
TestSqliteSessions = session_store_machine(sqlite).TestCase
TestSqliteCheckpoints = checkpoint_store_machine(sqlite).TestCase
TestSqliteApprovals = approval_store_machine(sqlite).TestCase
TestSqliteMemorySessions = session_store_machine(sqlite_memory).TestCase
TestSqliteMemoryCheckpoints = checkpoint_store_machine(sqlite_memory).TestCase
TestSqliteMemoryApprovals = approval_store_machine(sqlite_memory).TestCase
