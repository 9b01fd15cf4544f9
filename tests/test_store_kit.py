"""The conformance kit (``lousho_sessions.testing``) run over every store of ours."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fork_server
import pytest
from services_pg import drop_schema, postgres_url, require_postgres, schema_for
from services_redis import drop_prefix, prefix_for, redis_url, require_redis
from storekit import REDIS_LEASE_TTL, Kit

from lousho_sessions import (
    BaseApprovalStore,
    BaseCheckpointStore,
    BaseSessionStore,
    file_store,
    memory_store,
)
from lousho_sessions.postgres import PostgresStore
from lousho_sessions.redis import RedisStore
from lousho_sessions.sqlite import SqliteStore
from lousho_sessions.stores.adapters import sessions_contract, store_parts
from lousho_sessions.testing import (
    StoreContractTests,
    _end_to_end,
    _leases,
    approval_store_machine,
    checkpoint_store_machine,
    session_store_machine,
)


@pytest.fixture(autouse=True)
def _children_from_the_fork_server(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kit starts the children of its cross-process tests with "spawn", as users run it;
    ``TestSqliteStore`` keeps that. Every other store's children fork from the tests' fork
    server (tests/fork_server.py): the same tests, without importing the package afresh in
    each child (most of their time)."""
    if request.cls is not TestSqliteStore:
        for module in (_end_to_end, _leases):
            monkeypatch.setattr(module, "_SPAWN", fork_server.CONTEXT)


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


#: the keys of the encrypted variants: an old key that still opens, a current one that seals
KIT_KEYS = {"old": bytes(range(32)), "new": bytes(range(32, 64))}


class TestEncryptedSqliteStore(StoreContractTests):
    """The kit over a sealing store: every contract holds with the records sealed."""

    def make_store(self, tmp_path: Path) -> Any:
        return SqliteStore(tmp_path / "store.db", encryption=KIT_KEYS)

    def reopen_store(self, tmp_path: Path) -> Any:
        return SqliteStore(tmp_path / "store.db", encryption=KIT_KEYS)


class TestEncryptedFileStore(StoreContractTests):
    def make_store(self, tmp_path: Path) -> Any:
        return file_store(tmp_path / "store", encryption=KIT_KEYS)

    def reopen_store(self, tmp_path: Path) -> Any:
        return file_store(tmp_path / "store", encryption=KIT_KEYS)


class TestPostgresStore(StoreContractTests):
    """The kit on the real server, one schema per test (named after ``tmp_path``, dropped after)."""

    @pytest.fixture(autouse=True)
    def _schema(self, tmp_path: Path) -> Iterator[None]:
        require_postgres()
        yield
        drop_schema(schema_for(tmp_path))

    def make_store(self, tmp_path: Path) -> Any:
        return postgres(tmp_path)

    def reopen_store(self, tmp_path: Path) -> Any:
        return postgres(tmp_path)


class TestEncryptedPostgresStore(TestPostgresStore):
    def make_store(self, tmp_path: Path) -> Any:
        return postgres(tmp_path, encryption=KIT_KEYS)

    def reopen_store(self, tmp_path: Path) -> Any:
        return postgres(tmp_path, encryption=KIT_KEYS)


class DroppingPostgresStore(PostgresStore):
    """A store whose ``close()`` drops its schema: the state machines make one per run."""

    def close(self) -> None:
        super().close()
        drop_schema(self.schema)


def postgres(path: Path, **options: Any) -> Any:
    # a short lease: the kit's killed-holder test waits for it to run out
    return PostgresStore(
        postgres_url(), schema=schema_for(path), min_size=1, max_size=4, lease_ttl=2.0, **options
    )


def postgres_machine(path: Path) -> Any:
    require_postgres()
    return DroppingPostgresStore(postgres_url(), schema=schema_for(path), max_size=2)


class TestRedisStore(StoreContractTests):
    """The kit on the real server, one key prefix per test (named after ``tmp_path``, dropped after)."""

    @pytest.fixture(autouse=True)
    def _prefix(self, tmp_path: Path) -> Iterator[None]:
        require_redis()
        yield
        drop_prefix(prefix_for(tmp_path))

    def make_store(self, tmp_path: Path) -> Any:
        # a short lease: the kit's killed-holder test waits for it to run out
        return RedisStore(redis_url(), prefix=prefix_for(tmp_path), lease_ttl=REDIS_LEASE_TTL)

    def reopen_store(self, tmp_path: Path) -> Any:
        return self.make_store(tmp_path)


class TestEncryptedRedisStore(TestRedisStore):
    def make_store(self, tmp_path: Path) -> Any:
        return RedisStore(
            redis_url(), prefix=prefix_for(tmp_path), lease_ttl=REDIS_LEASE_TTL, encryption=KIT_KEYS
        )


class DroppingRedisStore(RedisStore):
    """A store whose ``close()`` deletes its keys: the state machines make one per run."""

    def close(self) -> None:
        super().close()
        drop_prefix(self.prefix)


def redis_machine(path: Path) -> Any:
    require_redis()
    return DroppingRedisStore(redis_url(), prefix=prefix_for(path))


def memory(path: Path) -> Any:
    return memory_store()


def files(path: Path) -> Any:
    return file_store(path)


def sqlite(path: Path) -> Any:
    return SqliteStore(path / "store.db")


def sqlite_encrypted(path: Path) -> Any:
    return SqliteStore(path / "store.db", encryption=KIT_KEYS)


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
TestEncryptedSqliteSessions = session_store_machine(sqlite_encrypted).TestCase
TestEncryptedSqliteCheckpoints = checkpoint_store_machine(sqlite_encrypted).TestCase
TestEncryptedSqliteApprovals = approval_store_machine(sqlite_encrypted).TestCase
TestSqliteMemorySessions = session_store_machine(sqlite_memory).TestCase
TestSqliteMemoryCheckpoints = checkpoint_store_machine(sqlite_memory).TestCase
TestSqliteMemoryApprovals = approval_store_machine(sqlite_memory).TestCase
TestPostgresSessions = session_store_machine(postgres_machine).TestCase
TestPostgresCheckpoints = checkpoint_store_machine(postgres_machine).TestCase
TestPostgresApprovals = approval_store_machine(postgres_machine).TestCase
TestRedisSessions = session_store_machine(redis_machine).TestCase
TestRedisCheckpoints = checkpoint_store_machine(redis_machine).TestCase
TestRedisApprovals = approval_store_machine(redis_machine).TestCase

# The state machines run many examples, each opening a store (over PostgreSQL and Redis: a
# schema or key prefix and connections); on a loaded CI machine with three workers one took
# over the default 120 s, and the timeout firing inside Hypothesis reads as a flaky strategy.
for _machine_test in (
    TestPostgresSessions,
    TestPostgresCheckpoints,
    TestPostgresApprovals,
    TestRedisSessions,
    TestRedisCheckpoints,
    TestRedisApprovals,
    TestEncryptedSqliteSessions,
):
    _machine_test.pytestmark = [pytest.mark.timeout(600)]  # type: ignore[attr-defined]


def test_our_parts_subclass_the_bases_and_check_fences(store: Kit) -> None:
    """Our stores are not adapted: they subclass the bases, check fences, and say their scope."""
    assert isinstance(store.sessions, BaseSessionStore)
    assert isinstance(store.checkpoints, BaseCheckpointStore)
    assert isinstance(store.approvals, BaseApprovalStore)
    assert sessions_contract(store.sessions) is store.sessions
    for part in (store.sessions, store.checkpoints, store.approvals):
        assert part.fenced_writes, part
    scope = "process" if store.kind in ("memory", "sqlite-memory") else "machine"
    assert store.sessions.lock_scope == scope
    parts = store_parts({"sessions": store.sessions, "checkpoints": store.checkpoints})
    assert parts.sessions is store.sessions and parts.checkpoints is store.checkpoints


def test_the_docs_example_store_passes_the_kit(tmp_path: Path) -> None:
    """docs/writing-a-store.md's custom store and its five-line kit usage, run by pytest as a user would."""
    doc = Path(__file__).parent.parent / "docs" / "writing-a-store.md"
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), flags=re.S)
    (store,) = [b for b in blocks if "class JsonDictSessionStore(BaseSessionStore)" in b]
    (kit,) = [b for b in blocks if "class TestJsonDictStore(StoreContractTests)" in b]
    (tmp_path / "test_example_store.py").write_text(store + "\n\n" + kit)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error", "-rs"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = result.stdout.strip().splitlines()[-1]
    assert "passed" in summary and "failed" not in summary, summary
