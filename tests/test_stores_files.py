"""What only the file stores do: layout, atomic writes, corrupt files, the golden v1 file."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from lousho_sessions.errors import (
    SchemaVersionError,
    StoreConflictError,
    StoreCorruptError,
    StoreError,
)
from lousho_sessions.messages import ImagePart, Message, ReasoningPart, TextPart
from lousho_sessions.serde import message_to_dict
from lousho_sessions.stores import files
from lousho_sessions.stores.base import AgentStore
from lousho_sessions.stores.files import (
    SESSION_FILE_VERSION,
    FileApprovalStore,
    FileCheckpointStore,
    FileSessionStore,
    file_store,
)

FIXTURES = Path(__file__).parent / "fixtures"


def turn(n: int) -> list[Message]:
    return [Message.user(f"q{n}"), Message.assistant(f"a{n}")]


def texts(messages: list[Message] | None) -> list[str]:
    assert messages is not None
    return [m.text for m in messages]


def test_file_store_layout(tmp_path: Path) -> None:
    root = tmp_path / "deep" / "er"
    store = file_store(root)
    assert isinstance(store, AgentStore)
    assert isinstance(store.sessions, FileSessionStore)
    assert isinstance(store.checkpoints, FileCheckpointStore)
    assert isinstance(store.approvals, FileApprovalStore)
    # reading never creates the directory
    assert store.sessions.load("s1") is None
    assert store.checkpoints.list() == []
    assert store.approvals.list() == []
    store.sessions.delete("s1")
    assert not root.exists()
    store.sessions.save("s1", turn(1))
    store.checkpoints.save("s1.turn-2", {"step": 1})
    store.approvals.create({"id": "ap.1", "session_id": "s1", "status": "pending"})
    names = set(os.listdir(root))
    assert {"s1.json", "s1.turn-2.checkpoint.json", "ap.1.approval.json"} <= names
    assert not [n for n in names if n.endswith(".tmp")]
    data = json.loads((root / "s1.json").read_text())
    assert (data["format"], data["version"]) == ("lousho.session", SESSION_FILE_VERSION)
    assert [m["role"] for m in data["messages"]] == ["user", "assistant"]


def test_golden_v1_session_file(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "session_v1.json", tmp_path / "golden.json")
    store = FileSessionStore(tmp_path)
    messages = store.load("golden")
    assert messages is not None
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    image = messages[0].content[1]
    assert isinstance(image, ImagePart)
    assert (image.data, image.media_type) == (b"\x89PNG\r\n\x1a\n", "image/png")
    assert messages[1].tool_calls[0].arguments == {"query": "png header", "limit": 3}
    assert messages[1].usage is not None and messages[1].usage.input_tokens == 120
    assert messages[2].tool_call_id == "call_1"
    assert messages[3].metadata == {"trace": "t-42"}
    # fields from a newer release survive a load, an append and a save
    original = json.loads((FIXTURES / "session_v1.json").read_text())["messages"]
    store.append("golden", [Message.user("more")], 4)
    reread = json.loads((tmp_path / "golden.json").read_text())["messages"]
    assert reread[:4] == original
    store.save("golden", messages)
    assert [message_to_dict(m) for m in store.load("golden") or []] == original


def test_golden_v2_session_file_keeps_reasoning_parts_exactly(tmp_path: Path) -> None:
    """Version 2: assistant messages may hold reasoning parts (any family, unknown fields kept)."""
    shutil.copy(FIXTURES / "session_v2.json", tmp_path / "golden.json")
    store = FileSessionStore(tmp_path)
    messages = store.load("golden")
    assert messages is not None
    thinking, encrypted, _ = messages[1].content
    assert isinstance(thinking, ReasoningPart) and thinking.signature == "EqQBCgIYAhIMsig"
    assert isinstance(encrypted, ReasoningPart) and encrypted.provider == "openai"
    assert (encrypted.id, encrypted.data, encrypted.extra) == (
        "rs_123",
        "gAAAAABencrypted==",
        {"summary_index": 0},
    )
    assert messages[1].text == "Let me look it up."
    assert messages[1].reasoning == "Let me think about PNG headers."
    original = json.loads((FIXTURES / "session_v2.json").read_text())["messages"]
    store.save("golden", messages)
    data = json.loads((tmp_path / "golden.json").read_text())
    assert data["version"] == SESSION_FILE_VERSION == 2
    assert data["messages"] == original


def test_dir_and_writes_leave_no_temp_files(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path / "new")
    for n in range(3):
        store.append("s1", turn(n), 2 * n)
    assert sorted(os.listdir(tmp_path / "new")) == ["s1.json", "s1.json.lock"]


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b"",
        b'{"format":"lousho.session","version":1,"messages":[{"role":"us',  # truncated
        b"[]",
        b'{"format":"something.else","version":1,"messages":[]}',
        b'{"format":"lousho.session","version":"1","messages":[]}',
        b'{"format":"lousho.session","version":1,"messages":{}}',
        b'{"format":"lousho.session","version":1,"messages":[{"role":"pirate"}]}',
        b"\xff\xfe\x00garbage",
    ],
)
def test_corrupt_session_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "s1.json"
    path.write_bytes(content)
    store = FileSessionStore(tmp_path)
    with pytest.raises(StoreCorruptError) as info:
        store.load("s1")
    assert str(path) in str(info.value)
    assert isinstance(info.value, ValueError)
    if b"pirate" not in content:  # an append reads the messages' JSON, not their meaning
        with pytest.raises(StoreCorruptError, match=re.escape(str(path))):
            store.append("s1", turn(1), 0)
    assert path.read_bytes() == content


def test_newer_session_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s1.json"
    content = json.dumps(
        {"format": "lousho.session", "version": SESSION_FILE_VERSION + 1, "messages": []}
    ).encode()
    path.write_bytes(content)
    store = FileSessionStore(tmp_path)
    with pytest.raises(SchemaVersionError, match=re.escape(str(path))):
        store.load("s1")
    with pytest.raises(SchemaVersionError, match="newer"):
        store.append("s1", turn(1), 0)
    assert path.read_bytes() == content


def test_corrupt_checkpoint_and_approval(tmp_path: Path) -> None:
    (tmp_path / "s1.turn-0.checkpoint.json").write_text("{oops")
    (tmp_path / "a1.approval.json").write_text("[1, 2]")
    with pytest.raises(StoreCorruptError, match=re.escape("s1.turn-0.checkpoint.json")):
        FileCheckpointStore(tmp_path).load("s1.turn-0")
    approvals = FileApprovalStore(tmp_path)
    with pytest.raises(StoreCorruptError, match=re.escape("a1.approval.json")):
        approvals.get("a1")
    with pytest.raises(StoreCorruptError, match=re.escape("a1.approval.json")):
        approvals.resolve("a1", approved=True)
    assert (tmp_path / "a1.approval.json").read_text() == "[1, 2]"


def test_checkpoint_list_ignores_other_files(tmp_path: Path) -> None:
    store = file_store(tmp_path)
    store.sessions.save("s1", turn(1))  # type: ignore[union-attr]
    store.checkpoints.save("s1.turn-0", {})  # type: ignore[union-attr]
    (tmp_path / ".s1.turn-1.checkpoint.json.abc.tmp").write_text("{}")
    (tmp_path / "not..valid.checkpoint.json").write_text("{}")
    assert store.checkpoints.list() == ["s1.turn-0"]  # type: ignore[union-attr]


def test_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileSessionStore(tmp_path)
    first = turn(1)
    store.save("s1", first)
    before = (tmp_path / "s1.json").read_bytes()
    revision = store.revision("s1")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(StoreError, match=re.escape("s1.json")):
        store.append("s1", turn(2), 2)
    monkeypatch.undo()
    assert (tmp_path / "s1.json").read_bytes() == before
    assert store.revision("s1") == revision
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert store.load("s1") == first
    store.append("s1", turn(2), 2)  # the cache did not take the failed write for done
    assert texts(store.load("s1")) == ["q1", "a1", "q2", "a2"]


def test_append_sees_writes_of_other_instances(tmp_path: Path) -> None:
    # Two store objects stand for two processes: each caches what it wrote.
    mine, theirs = FileSessionStore(tmp_path), FileSessionStore(tmp_path)
    mine.save("s1", turn(1))
    theirs.append("s1", turn(2), 2)
    with pytest.raises(StoreConflictError, match="found 4"):
        mine.append("s1", turn(3), 2)
    mine.append("s1", turn(3), 4)
    assert texts(theirs.load("s1")) == ["q1", "a1", "q2", "a2", "q3", "a3"]
    theirs.delete("s1")
    with pytest.raises(StoreConflictError, match="found 0"):
        mine.append("s1", turn(4), 6)


def test_append_sees_edits_by_hand(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    store.save("s1", turn(1))
    revision = store.revision("s1")
    path = tmp_path / "s1.json"
    data = json.loads(path.read_text())
    data["messages"] = data["messages"][:1]
    del data["revision"]
    path.write_text(json.dumps(data, indent=1))
    assert store.revision("s1") != revision
    store.append("s1", [Message.assistant("edited")], 1)
    assert texts(store.load("s1")) == ["q1", "edited"]


def test_image_bytes_in_the_file(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    message = Message.user([TextPart("pic"), ImagePart(data=bytes(range(256)))])
    store.save("s1", [message])
    assert store.load("s1") == [message]
    assert b"\x00" not in (tmp_path / "s1.json").read_bytes()


def test_cache_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "_CACHE_MAX_CHARS", 2000)
    store = FileSessionStore(tmp_path)
    for n in range(10):
        store.save(f"s{n}", turn(n))
    assert store._cache_chars <= 2000
    assert 0 < len(store._cache) < 10
    store.append("s0", turn(10), 2)  # an evicted session is read again
    assert texts(store.load("s0")) == ["q0", "a0", "q10", "a10"]
