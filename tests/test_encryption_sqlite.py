"""Encryption at rest on SQLite: sealed messages and checkpoints are BLOBs (no base64), and a
store sealed by an older release (base64 text) still opens and rotates to them."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

import pytest

from lousho_sessions import (
    DecryptionError,
    Message,
    ReasoningPart,
    StoreCorruptError,
    TextPart,
    ToolCall,
    Usage,
)
from lousho_sessions.serde import message_json, message_to_dict
from lousho_sessions.sqlite import SCHEMA_VERSION, SqliteStore
from lousho_sessions.stores._sealed_fields import dict_clear, message_clear
from lousho_sessions.usage_totals import SUMMARY_KEY

FIXTURES = Path(__file__).parent / "fixtures"
#: the key of ``fixtures/store_v4_sealed.sql``
FIXTURE_KEY = {"k-2025": bytes(range(32))}
KEYS = {"k1": bytes(range(1, 33))}
MARKER = "MARKER-51c2-personal-data"
TAG = 16  # bytes of the AES-GCM tag
NONCE = 12


def rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_sealed_messages_and_checkpoints_are_blobs_holding_the_raw_ciphertext(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    message = Message("assistant", f"hi {MARKER}", usage=Usage(10, 5, 0.25))
    checkpoint = {"status": "running", "new": [{"text": MARKER}]}
    with SqliteStore(path, encryption=KEYS) as store:
        store.sessions.save("s1", [message])
        store.checkpoints.save("s1.turn-1", checkpoint)
        store.approvals.create({"id": "a1", "session_id": "s1", "status": "pending"})
        assert store.sessions.load("s1") == [message]
        assert store.checkpoints.load("s1.turn-1") == checkpoint
        assert store.sessions.usage("s1") == Usage(10, 5, 0.25)
    ((value,),) = rows(path, "SELECT json FROM messages")
    assert isinstance(value, bytes)
    clear, nul, token = value.partition(b"\0")
    assert nul and json.loads(clear) == {
        "id": message.id,
        "role": "assistant",
        "created_at": message.created_at.isoformat(),
        "usage": {"input_tokens": 10, "output_tokens": 5, "cost_usd": 0.25},
    }
    # the token holds the whole message, its bytes as they are: no base64
    plain = len(message_json(message).encode())
    assert token.startswith(b"lse1.k1.") and len(token) == len(b"lse1.k1.") + NONCE + plain + TAG
    ((record,),) = rows(path, "SELECT json FROM checkpoints")
    assert isinstance(record, bytes) and record.startswith(b"\0lse1.k1.")  # sealed whole
    ((approval,),) = rows(path, "SELECT json FROM approvals")
    assert isinstance(approval, str) and approval.startswith('{"lousho.sealed":"lse1.k1.')
    at_rest = b"".join(p.read_bytes() for p in tmp_path.glob("store.db*") if p.is_file())
    assert MARKER.encode() not in at_rest


def test_a_store_sealed_by_an_older_release_opens_then_rotates_to_blobs(tmp_path: Path) -> None:
    """``fixtures/store_v4_sealed.sql``: base64 text envelopes, schema version 4."""
    path = tmp_path / "v4.db"
    conn = sqlite3.connect(path)
    conn.executescript((FIXTURES / "store_v4_sealed.sql").read_text())
    conn.close()
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    old = [
        Message("user", "my card ends in 4242", id="m1", created_at=at),
        Message("assistant", "noted: 4242", id="m2", created_at=at, usage=Usage(10, 5, 0.25)),
    ]
    with SqliteStore(path, encryption=FIXTURE_KEY) as store:
        assert store.sessions.load("user-42") == old
        new = Message("assistant", "again", usage=Usage(1, 2, 0.5))
        store.sessions.append("user-42", [new], 2)  # a BLOB beside the text rows
        assert store.sessions.load("user-42") == [*old, new]
        assert store.sessions.usage("user-42") == Usage(11, 7, 0.75)  # both forms summed
        checkpoint = store.checkpoints.load("user-42.turn-2")
        assert checkpoint is not None and checkpoint["new"] == [{"text": "card 4242"}]
        approval = store.approvals.get("ap1")
        assert approval is not None and approval["call"]["arguments"] == {"card": "4242"}
        assert [type(v) for (v,) in rows(path, "SELECT json FROM messages ORDER BY seq")] == [
            str,
            str,
            bytes,
        ]
        result = store.rotate_key()
        # the text messages and checkpoint become BLOBs; the approval stays text
        assert (result.messages, result.checkpoints, result.approvals) == (2, 1, 0)
        assert store.rotate_key().total == 0
    assert rows(path, "SELECT DISTINCT typeof(json) FROM messages") == [("blob",)]
    assert rows(path, "SELECT typeof(json) FROM checkpoints") == [("blob",)]
    assert rows(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    with SqliteStore(path, encryption=FIXTURE_KEY) as store:
        assert store.sessions.load("user-42") == [*old, new]
        assert store.sessions.usage("user-42") == Usage(11, 7, 0.75)
        assert store.checkpoints.load("user-42.turn-2") == checkpoint
    with SqliteStore(path) as store:  # without the keys: usage is summed, nothing opens
        assert store.sessions.usage("user-42") == Usage(11, 7, 0.75)
        with pytest.raises(DecryptionError, match="no encryption keys"):
            store.sessions.load("user-42")


def _damage(value: bytes, how: str) -> bytes:
    clear, _, token = value.partition(b"\0")
    if how == "truncated":
        return value[:-1]
    if how == "flipped":
        return value[:-5] + bytes([value[-5] ^ 1]) + value[-4:]
    if how == "version":
        return clear + b"\0lse9" + token[4:]
    return clear + b"\0" + token.replace(b".", b"-")  # "no token": no key id to read


@pytest.mark.parametrize(
    ("how", "error", "says"),
    [
        ("truncated", DecryptionError, "cannot decrypt"),
        ("flipped", DecryptionError, "cannot decrypt"),
        ("version", DecryptionError, "format 'lse9'"),
        ("no token", StoreCorruptError, "not a sealed value"),
    ],
)
def test_a_damaged_blob_is_refused_naming_the_session(
    how: str, error: type[Exception], says: str, tmp_path: Path
) -> None:
    path = tmp_path / "store.db"
    with SqliteStore(path, encryption=KEYS) as store:
        store.sessions.save("s-damaged", [Message("user", MARKER)])
        store.checkpoints.save("s-damaged.turn-1", {"new": [{"text": MARKER}]})
    conn = sqlite3.connect(path)
    with conn:
        for table in ("messages", "checkpoints"):
            ((value,),) = conn.execute(f"SELECT json FROM {table}").fetchall()
            conn.execute(f"UPDATE {table} SET json = ?", (_damage(value, how),))
    conn.close()
    with SqliteStore(path, encryption=KEYS) as store:
        with pytest.raises(error, match=says) as caught:
            store.sessions.load("s-damaged")
        assert "s-damaged" in str(caught.value)
        with pytest.raises(error, match=says) as caught:
            store.checkpoints.load("s-damaged.turn-1")
        assert "s-damaged.turn-1" in str(caught.value)


TRICKY = 'a "quoted" ,"usage":{} ,"content": \\ é ☃ \x00 end'
CLEAR_CASES = [
    Message("user", "plain"),
    Message("assistant", "", tool_calls=[ToolCall("c1", "f", {"usage": TRICKY, "x": [1]})]),
    Message("tool", TRICKY, tool_call_id="c1", is_error=True),
    Message("assistant", TRICKY, id=TRICKY, usage=Usage(10, 5, 0.25)),
    Message("assistant", "r", usage=Usage(1, 2, 1e-9, cache_read_tokens=3, reasoning_tokens=4)),
    Message("assistant", "m", usage=Usage(1, 2, 0.5), metadata={"note": TRICKY}),
    Message("user", "s", metadata={SUMMARY_KEY: {"usage": {"input_tokens": 7}}}),
    Message("assistant", "x", usage=Usage(1, 2, 0.5, extra={"usage": TRICKY})),
    Message("user", [TextPart("t", extra={"usage": 1}), ReasoningPart(TRICKY, "openai")]),
    Message("assistant", "e", extra={"x": {"usage": {"input_tokens": 99}}, "z": TRICKY}),
]


@pytest.mark.parametrize("message", CLEAR_CASES, ids=range(len(CLEAR_CASES)))
def test_the_clear_fields_cut_from_the_json_are_the_ones_encoded(message: Message) -> None:
    """The common shapes' clear fields are cut out of the message's JSON, not encoded again:
    the same fields, whatever the message holds (quotes, the key names inside values)."""
    data = message_to_dict(message)
    text = message_json(message)
    assert json.loads(message_clear(data, text)) == dict_clear(data)
    with SqliteStore(":memory:", encryption=KEYS) as store:
        store.sessions.save("s1", [message])
        assert store.sessions.load("s1") == [message]
        assert store.sessions.usage("s1") == (message.usage or Usage()) + summary_usage(message)


def summary_usage(message: Message) -> Usage:
    summary = message.metadata.get(SUMMARY_KEY)
    return Usage(**summary["usage"]) if summary and message.role != "assistant" else Usage()
