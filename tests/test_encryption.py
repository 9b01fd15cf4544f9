"""Encryption at rest on every store: sealed bytes, wrong keys, moved records, rotation, URLs."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fork_server
import psycopg
import pytest
import redis
from services_pg import drop_schema, postgres_url, require_postgres, schema_for
from services_redis import drop_prefix, prefix_for, redis_url, require_redis

from lousho_sessions import (
    DecryptionError,
    FunctionProvider,
    Message,
    ModelRequest,
    ToolCall,
    Usage,
    create_agent,
    file_store,
    memory_store,
    open_store,
    tool,
)
from lousho_sessions.encryption import Encryption, EncryptionKeyError
from lousho_sessions.postgres import PostgresStore
from lousho_sessions.redis import RedisStore
from lousho_sessions.sqlite import SqliteStore
from lousho_sessions.stores.urls import StoreURLError

sys.path.insert(0, str(Path(__file__).parent))
from state_kill_child import bump
from test_crash import check, crash_and_resume
from test_encryption_sqlite import rows

#: in every sealed record's plaintext; never in the bytes at rest
MARKER = "MARKER-7f3a-personal-data"
OLD = {"old": bytes(range(32))}
NEW = {"new": bytes(range(1, 33))}
BOTH = {**OLD, **NEW}  # the last one, "new", seals; both open
SIDS = ("s1", "s2")


def files_at_rest(directory: Path, pattern: str) -> bytes:
    """The bytes of every file under ``directory`` matching ``pattern`` (lock dirs included)."""
    found = [p for m in directory.glob(pattern) for p in ([m] if m.is_file() else m.rglob("*"))]
    return b"".join(p.read_bytes() for p in sorted(found) if p.is_file())


class Target:
    """A store kind: how to open it with given keys, and every byte it keeps at rest."""

    def __init__(self, kind: str, path: Path) -> None:
        self.kind, self.path = kind, path
        self.opened: list[Any] = []

    def open(self, encryption: Any) -> Any:
        if self.kind == "memory":  # one store: it keeps nothing beyond its process
            memory_store(encryption=encryption)
            if self.opened:
                return self.opened[0]
            store: Any = memory_store(encryption=encryption)
        elif self.kind == "files":
            store = file_store(self.path / "files", encryption=encryption)
        elif self.kind == "sqlite":
            store = SqliteStore(self.path / "store.db", encryption=encryption)
        elif self.kind == "postgres":
            store = PostgresStore(
                postgres_url(), schema=schema_for(self.path), max_size=2, encryption=encryption
            )
        else:
            store = RedisStore(redis_url(), prefix=prefix_for(self.path), encryption=encryption)
        self.opened.append(store)
        return store

    def at_rest(self) -> bytes:
        """Every byte the store keeps (files, database rows, Redis values)."""
        if self.kind == "files":
            return b"".join(
                p.read_bytes() for p in sorted((self.path / "files").rglob("*")) if p.is_file()
            )
        if self.kind == "sqlite":
            return files_at_rest(self.path, "store.db*")
        if self.kind == "postgres":
            schema = schema_for(self.path)
            with psycopg.connect(postgres_url(), autocommit=True) as conn:
                rows = [
                    str(row)
                    for table in ("sessions", "messages", "checkpoints", "approvals")
                    for row in conn.execute(f'SELECT * FROM "{schema}".{table}').fetchall()
                ]
            return "\n".join(rows).encode()
        client = redis.Redis.from_url(redis_url())
        out = []
        for key in client.scan_iter(match=f"{prefix_for(self.path)}:*"):
            out.append(client.dump(key) or b"")
        client.close()
        return b"".join(out)

    def close(self) -> None:
        for store in self.opened:
            store.close() if hasattr(store, "close") else None
        if self.kind == "postgres":
            drop_schema(schema_for(self.path))
        if self.kind == "redis":
            drop_prefix(prefix_for(self.path))


SEALING_KINDS = ("files", "sqlite", "postgres", "redis")


@pytest.fixture(params=("memory", *SEALING_KINDS))
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "postgres":
        require_postgres()
    if request.param == "redis":
        require_redis()
    t = Target(request.param, tmp_path)
    yield t
    t.close()


def fill(store: Any, sid: str = "s1") -> list[Message]:
    """A transcript, a checkpoint and an approval of ``sid``, each holding ``MARKER``."""
    messages = [
        Message("user", f"hello {MARKER}", metadata={"note": MARKER}),
        Message("assistant", f"hi {MARKER}", usage=Usage(10, 5, 0.25, cache_read_tokens=2)),
    ]
    store.sessions.save(sid, messages[:1])
    store.sessions.append(sid, messages[1:], 1)
    store.checkpoints.save(
        f"{sid}.turn-1",
        {
            "status": "running",
            "attempts": 1,
            "new": [{"text": MARKER}],
            "updated_at": "2024-01-01T00:00:00+00:00",
        },
    )
    store.approvals.create(
        {
            "id": f"appr-{sid}",
            "session_id": sid,
            "status": "pending",
            "created_at": "2024-01-01T00:00:00+00:00",
            "call": {"id": "c1", "name": "pay", "arguments": {"to": MARKER}},
        }
    )
    return messages


def test_round_trip_and_nothing_in_clear_at_rest(target: Target) -> None:
    store = target.open(BOTH)
    messages = fill(store)
    assert store.sessions.load("s1") == messages
    assert store.checkpoints.load("s1.turn-1")["new"] == [{"text": MARKER}]
    assert store.approvals.get("appr-s1")["call"]["arguments"] == {"to": MARKER}
    resolved = store.approvals.resolve("appr-s1", approved=True, reason=f"ok {MARKER}")
    assert store.approvals.get("appr-s1") == resolved
    assert [r["id"] for r in store.approvals.list(session_id="s1", status="approved")] == [
        "appr-s1"
    ]
    # listing and the sweeps' fields stay readable; the usage totals still add up
    assert store.sessions.list_ids() == ["s1"]
    assert store.sessions.info("s1").messages == 2
    fields = dict(store.checkpoints.pending_fields(["status", "attempts", "new"]))
    assert fields == {"s1.turn-1": {"status": "running", "attempts": 1, "new": [{"text": MARKER}]}}
    assert dict(store.checkpoints.pending_fields(["status"])) == {
        "s1.turn-1": {"status": "running"}
    }
    assert store.sessions.usage("s1") == Usage(10, 5, 0.25, cache_read_tokens=2)
    if target.kind != "memory":
        assert MARKER.encode() not in target.at_rest()
        assert b"lse1.new." in target.at_rest() or target.kind == "redis"  # Redis DUMPs compress
    reopened = target.open(BOTH)
    assert reopened.sessions.load("s1") == messages


@pytest.mark.parametrize("kind", SEALING_KINDS)
def test_a_wrong_or_missing_key_names_the_session_and_never_yields_garbage(
    kind: str, tmp_path: Path
) -> None:
    if kind == "postgres":
        require_postgres()
    if kind == "redis":
        require_redis()
    target = Target(kind, tmp_path)
    try:
        fill(target.open(OLD), "s-secret")
        for keys, says in (
            (None, "no encryption keys"),
            ({"old": bytes(32)}, "wrong key"),
            (NEW, "not among"),
        ):
            store = target.open(keys)
            for read, key in (
                (store.sessions.load, "s-secret"),
                (store.checkpoints.load, "s-secret.turn-1"),
                (store.approvals.get, "appr-s-secret"),
            ):
                with pytest.raises(DecryptionError, match=says) as caught:
                    read(key)
                assert "s-secret" in str(caught.value) and "'old'" in str(caught.value)
    finally:
        target.close()


def _move_sqlite(target: Target) -> None:
    import sqlite3

    with sqlite3.connect(target.path / "store.db") as conn:
        conn.execute(
            "UPDATE messages SET json = (SELECT json FROM messages WHERE session_id = 's1' AND seq = 1) WHERE session_id = 's2' AND seq = 1"
        )
        conn.execute(
            "UPDATE checkpoints SET json = (SELECT json FROM checkpoints WHERE turn_id = 's1.turn-1') WHERE turn_id = 's2.turn-1'"
        )


def _move_postgres(target: Target) -> None:
    schema = schema_for(target.path)
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        conn.execute(
            f"UPDATE \"{schema}\".messages SET body = (SELECT body FROM \"{schema}\".messages WHERE session_id = 's1' AND seq = 1) WHERE session_id = 's2' AND seq = 1"
        )
        conn.execute(
            f"UPDATE \"{schema}\".checkpoints SET body = (SELECT body FROM \"{schema}\".checkpoints WHERE turn_id = 's1.turn-1') WHERE turn_id = 's2.turn-1'"
        )


def _move_redis(target: Target) -> None:
    prefix = prefix_for(target.path)
    client = redis.Redis.from_url(redis_url())
    moved: Any = client.lindex(f"{prefix}:{{s1}}:messages", 1)
    client.lset(f"{prefix}:{{s2}}:messages", 1, moved)
    body = client.hget(f"{prefix}:{{s1}}:checkpoints", "s1.turn-1")
    client.hset(f"{prefix}:{{s2}}:checkpoints", "s2.turn-1", body)
    client.close()


def _move_files(target: Target) -> None:
    directory = target.path / "files"
    s1 = json.loads((directory / "s1.json").read_text())
    s2 = json.loads((directory / "s2.json").read_text())
    s2["messages"][1] = s1["messages"][1]
    (directory / "s2.json").write_text(json.dumps(s2))
    (directory / "s2.turn-1.checkpoint.json").write_bytes(
        (directory / "s1.turn-1.checkpoint.json").read_bytes()
    )


@pytest.mark.parametrize("kind", SEALING_KINDS)
def test_a_record_moved_to_another_session_fails_to_open(kind: str, tmp_path: Path) -> None:
    if kind == "postgres":
        require_postgres()
    if kind == "redis":
        require_redis()
    target = Target(kind, tmp_path)
    try:
        store = target.open(BOTH)
        fill(store, "s1")
        fill(store, "s2")
        {
            "sqlite": _move_sqlite,
            "postgres": _move_postgres,
            "redis": _move_redis,
            "files": _move_files,
        }[kind](target)
        store = target.open(BOTH)
        with pytest.raises(DecryptionError, match=r"s2.*moved from another session"):
            store.sessions.load("s2")
        with pytest.raises(DecryptionError, match="moved from another session"):
            store.checkpoints.load("s2.turn-1")
        assert store.sessions.load("s1") is not None  # the original still opens
    finally:
        target.close()


def test_rotation_reseals_everything_then_the_old_key_can_go(target: Target) -> None:
    old = target.open(OLD)
    before = fill(old, "s1")
    clear = target.open(None)
    fill(clear, "s2")  # written in clear before encryption was turned on
    both = target.open(BOTH)  # "new" seals from now on; "old" still opens
    assert both.sessions.load("s1") == before
    both.sessions.append("s1", [Message("user", f"again {MARKER}")], 2)
    if target.kind != "memory":
        at_rest = target.at_rest()
        assert (b"lse1.old." in at_rest and b"lse1.new." in at_rest) or target.kind == "redis"
    result = both.rotate_key(batch_size=2)  # small batches: paging is exercised
    if target.kind != "memory":
        # s1: 2 messages under "old" (the third is "new" already); s2: 2 in clear
        assert (result.messages, result.checkpoints, result.approvals, result.skipped) == (
            4,
            2,
            2,
            0,
        )
        assert MARKER.encode() not in target.at_rest()
        assert b"lse1.old." not in target.at_rest()
    assert both.rotate_key().total == 0  # nothing left to do
    only_new = target.open(NEW)
    assert only_new.sessions.load("s1")[:2] == before
    assert only_new.sessions.load("s2") is not None
    assert only_new.checkpoints.load("s2.turn-1")["new"] == [{"text": MARKER}]
    assert only_new.approvals.get("appr-s2")["call"]["arguments"] == {"to": MARKER}
    assert only_new.sessions.usage("s1").input_tokens == 10


def test_rotate_key_command(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    fill(SqliteStore(db, encryption=OLD))
    env = dict(os.environ, LOUSHO_TEST_KEYS=_env_keys(BOTH))
    url = f"sqlite:///{db}?encryption_key_env=LOUSHO_TEST_KEYS"
    done = fork_server.run(
        ["-m", "lousho_sessions", "rotate-key", "--store", url, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "messages": 2,
        "checkpoints": 1,
        "approvals": 1,
        "skipped": 0,
    }
    checkpoint = SqliteStore(db, encryption=NEW).checkpoints.load("s1.turn-1")
    assert checkpoint is not None and checkpoint["new"] == [{"text": MARKER}]


def _env_keys(keys: dict[str, bytes]) -> str:
    return ",".join(f"{k}:{base64.b64encode(v).decode()}" for k, v in keys.items())


def test_store_urls_take_keys_from_the_environment_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APP_KEYS", _env_keys(BOTH))
    with open_store(f"sqlite:///{tmp_path}/a.db?encryption_key_env=APP_KEYS") as store:
        assert store.backend.sealing.encryption == Encryption(BOTH)
        fill(store)
    assert MARKER.encode() not in files_at_rest(tmp_path, "a.db*")
    with open_store(f"file://{tmp_path}/f?encryption_key_env=APP_KEYS") as store:
        fill(store)
        assert store.backend.sessions.sealing.encryption is not None
    open_store("memory:?encryption_key_env=APP_KEYS").close()
    secret = base64.b64encode(bytes(32)).decode()
    for url in (
        f"sqlite:///{tmp_path}/b.db?encryption_key={secret}",
        f"sqlite:///{tmp_path}/b.db?encryption=k1:{secret}",
        f"redis://127.0.0.1:6379/0?key={secret}",
    ):
        with pytest.raises(StoreURLError, match="never read from a store URL") as caught:
            open_store(url)
        assert secret not in str(caught.value)
    monkeypatch.setenv("BAD_KEYS", "k1:not-base64!")
    for name, says in (("UNSET_KEYS_X", "is not set"), ("BAD_KEYS", "not valid base64")):
        with pytest.raises(StoreURLError, match=says):
            open_store(f"sqlite:///{tmp_path}/c.db?encryption_key_env={name}")


def test_bad_keys_are_refused_clearly() -> None:
    with pytest.raises(EncryptionKeyError, match="must be 32 bytes, got 16 bytes"):
        SqliteStore(":memory:", encryption={"k": bytes(16)})
    with pytest.raises(EncryptionKeyError, match="does not match"):
        Encryption({"a.b": bytes(32)})
    with pytest.raises(EncryptionKeyError, match="is not one of the keys"):
        Encryption(OLD, current="nope")
    assert "\\x00" not in repr(Encryption(BOTH)) and repr(Encryption(BOTH)) == (
        "Encryption(keys=['old', 'new'], current='new')"
    )


def test_importing_the_package_does_not_import_cryptography() -> None:
    code = (
        "import sys, lousho_sessions, lousho_sessions.sqlite, lousho_sessions.encryption;"
        "from lousho_sessions.sqlite import SqliteStore; SqliteStore(':memory:').sessions.load('x');"
        "assert 'cryptography' not in sys.modules, 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@tool(needs_approval=True)
def pay(to: str) -> str:
    """Pay someone."""
    return f"paid {to}"


def test_agent_turns_with_approvals_on_an_encrypted_store(tmp_path: Path) -> None:
    """A durable turn paused on an approval (sealed checkpoint and record), resolved in
    another agent on the same file, finished: nothing of it in clear at rest."""

    def model(request: ModelRequest) -> Message:
        if request.messages[-1].role == "tool":
            return Message("assistant", f"done {MARKER}", usage=Usage(3, 4))
        return Message("assistant", "", tool_calls=[ToolCall("c1", "pay", {"to": MARKER})])

    def agent() -> Any:
        store = SqliteStore(tmp_path / "agent.db", encryption=BOTH)
        return create_agent(provider=FunctionProvider(model), store=store, tools=[pay])

    result = agent().session("s1").send(f"pay {MARKER}")
    assert result.finish_reason == "awaiting-approval"
    assert MARKER.encode() not in files_at_rest(tmp_path, "agent.db*")
    second = agent()
    assert second.approvals.get(result.approval_id).call.arguments == {"to": MARKER}
    final = second.approvals.resolve(id=result.approval_id, approved=True)
    assert final is not None and final.text == f"done {MARKER}"
    session = second.session("s1")
    assert [m.role for m in session.load()] == ["user", "assistant", "tool", "assistant"]
    assert session.usage().output_tokens == 4
    assert MARKER.encode() not in files_at_rest(tmp_path, "agent.db*")


@pytest.mark.parametrize("point", ["after-model-1", "inside-tool-b", "final-save-before"])
def test_durable_crash_and_resume_on_an_encrypted_sqlite_store(point: str, tmp_path: Path) -> None:
    how = "kill" if point.startswith("inside") else "exit"
    outcome, lines = crash_and_resume("sqlite-encrypted", tmp_path, point, how)
    check(point, outcome, lines)
    at_rest = files_at_rest(tmp_path, "store.db*")
    assert b"all done" not in at_rest and b"lse1.crash-key." in at_rest


def test_sealed_message_read_without_its_store_is_refused() -> None:
    """A sealed message handed to the plain codec is refused, not read as an empty message."""
    from lousho_sessions.serde import messages_from_json

    store = SqliteStore(":memory:", encryption=OLD)
    text = store.sealing.message_text("s1", Message("user", MARKER))
    with pytest.raises(DecryptionError, match="sealed"):
        messages_from_json(f"[{text}]")


def test_a_fork_seals_its_messages_again_for_the_new_session(target: Target) -> None:
    """Records are bound to their session: a fork (one write, server-side where it can) seals
    the copied messages for the new id, so both sessions open, and nothing is in clear."""
    from lousho_sessions.stores.base import ForkRequest

    store = target.open(BOTH)
    messages = fill(store, "s1")
    forked = store.sessions.fork(ForkRequest("s1", "s3", keep=1))
    assert forked.messages == 1
    assert target.open(BOTH).sessions.load("s3") == messages[:1]
    whole = store.sessions.fork(ForkRequest("s1", "s4"))
    assert whole.messages == 2
    assert target.open(BOTH).sessions.load("s4") == messages
    assert target.open(BOTH).sessions.usage("s4") == Usage(10, 5, 0.25, cache_read_tokens=2)
    assert target.open(BOTH).sessions.load("s1") == messages
    if target.kind != "memory":
        assert MARKER.encode() not in target.at_rest()


def test_rotation_keeps_state_records_working(target: Target) -> None:
    """State is sealed like a checkpoint, yet a store may read its version in the commit's
    own statement (SQLite keeps it as JSON text where checkpoints are BLOBs): after a
    rotation a turn that changes state, ``update_state`` and a fork over state still work."""

    def model(request: ModelRequest) -> Message:
        if request.messages[-1].role == "tool":
            return Message("assistant", f"done {MARKER}")
        return Message("assistant", "", tool_calls=[ToolCall("c1", "bump", {})])

    def agent(store: Any) -> Any:
        return create_agent(provider=FunctionProvider(model), store=store, tools=[bump])

    first = agent(target.open(OLD)).session("s1")
    first.update_state(lambda s: s.update(note=MARKER))
    first.send("hi")
    assert first.state == {"note": MARKER, "visits": 1}
    both = target.open(BOTH)
    result = both.rotate_key()
    if target.kind != "memory":
        assert result.checkpoints >= 1 and result.skipped == 0
        assert b"lse1.old." not in target.at_rest()
        assert MARKER.encode() not in target.at_rest()
    if target.kind == "sqlite":
        kinds = rows(target.path / "store.db", "SELECT turn_id, typeof(json) FROM checkpoints")
        assert kinds == [("s1.state", "text")], kinds
    assert both.rotate_key().total == 0
    later = agent(target.open(NEW))
    session = later.session("s1")
    session.send("again")  # the commit reads and writes the state's version
    session.update_state(lambda s: s.update(plan="pro"))
    assert later.session("s1").state == {"note": MARKER, "visits": 2, "plan": "pro"}
    fork = later.fork("s1", "s9")
    assert fork.state == {"note": MARKER, "visits": 2, "plan": "pro"}
    fork.send("in the fork")
    assert later.session("s9").state["visits"] == 3
    assert later.session("s1").state["visits"] == 2
