"""Bad approval input is the caller's error (``InvalidApprovalError``, a ``ValueError``),
never ``StoreCorruptError`` (what is stored is fine) nor a stray builtin error, on every
store (issue 27 item 11)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from services_pg import drop_schema, postgres_url, require_postgres
from services_redis import drop_prefix, redis_url, require_redis

from lousho_sessions import InvalidApprovalError, LoushoError, StoreCorruptError, open_store
from lousho_sessions.stores.urls import URLStore


def _with(url: str, option: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{option}"


@pytest.fixture(params=["memory", "files", "sqlite", "postgres", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[URLStore]:
    drop: Any = lambda: None  # noqa: E731
    if request.param == "memory":
        url = "memory:"
    elif request.param == "files":
        url = f"file://{tmp_path}/files"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/a.db"
    elif request.param == "postgres":
        require_postgres()
        schema = "t_apin_" + secrets.token_hex(5)
        url, drop = _with(postgres_url(), f"schema={schema}"), lambda: drop_schema(schema)
    else:
        require_redis()
        prefix = "lousho-test-apin-" + secrets.token_hex(5)
        url, drop = _with(redis_url(), f"prefix={prefix}"), lambda: drop_prefix(prefix)
    opened = open_store(url)
    try:
        yield opened
    finally:
        opened.close()
        drop()


def test_a_malformed_new_record_is_an_input_error(store: URLStore) -> None:
    approvals = store.approvals
    assert approvals is not None
    for bad in ("not a record", {"id": "a1", "status": "weird"}, {"id": "a2", "call": 5}):
        with pytest.raises(InvalidApprovalError) as caught:
            approvals.create(bad)  # type: ignore[arg-type]
        assert not isinstance(caught.value, StoreCorruptError), caught.value
        assert isinstance(caught.value, ValueError) and isinstance(caught.value, LoushoError)
    assert approvals.list(status=None) == []  # nothing half-written


def test_a_decision_that_is_not_one_is_an_input_error(store: URLStore) -> None:
    approvals = store.approvals
    assert approvals is not None
    approvals.create({"id": "a1", "session_id": None, "status": "pending"})
    with pytest.raises(InvalidApprovalError, match="approved must be True or False"):
        approvals.resolve("a1", approved="no")  # type: ignore[arg-type]
    with pytest.raises(InvalidApprovalError, match="reason must be text"):
        approvals.resolve("a1", approved=True, reason=5)  # type: ignore[arg-type]
    record = approvals.get("a1")
    assert record is not None and record["status"] == "pending"  # "no" did not approve it
    assert approvals.resolve("a1", approved=False, reason="fine")["status"] == "denied"
