"""A turn encodes each message once: its checkpoints and result records are built from the
messages' kept texts (``serde.kept_message_json``) and handed to the store with their text
(``EncodedObject``), and its commit finds the texts kept (``serde.message_json``). The text
is always what encoding the dict gives."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import scripted
from hypothesis import given, settings
from hypothesis import strategies as st
from test_serde import MESSAGES, TURN_STATES

from lousho_sessions import (
    Message,
    ModelRequest,
    ToolCall,
    _kept_json,
    create_agent,
    file_store,
    memory_store,
    serde,
    tool,
)
from lousho_sessions._kept_json import KEPT_LIMIT, EncodedObject
from lousho_sessions.engine._checkpoint_codec import turn_checkpoint
from lousho_sessions.engine._checkpoints import TurnCheckpoints
from lousho_sessions.engine._turn_state import TurnState
from lousho_sessions.sqlite import SqliteStore
from lousho_sessions.stores.memory import MemoryCheckpointStore


@settings(max_examples=150, deadline=None)
@given(TURN_STATES, st.booleans())
def test_a_checkpoints_text_is_what_encoding_it_gives(state: TurnState, no_extra: bool) -> None:
    if no_extra:
        state.extra = {}
    checkpoint = turn_checkpoint(state, encoded=True)
    plain = serde._ENCODER.encode(dict(checkpoint))
    assert serde.to_json(checkpoint, what="t") == plain
    if no_extra:  # messages nested this little are spliced in: the text was made
        assert type(checkpoint) is EncodedObject and checkpoint.text == plain
    # without ``encoded`` it is the plain dict it always was
    again = turn_checkpoint(state)
    assert type(again) is dict
    again.pop("updated_at"), checkpoint.pop("updated_at")
    assert again == checkpoint


@settings(max_examples=100, deadline=None)
@given(st.lists(MESSAGES, min_size=1, max_size=3), st.booleans())
def test_a_result_records_text_is_what_encoding_it_gives(
    results: list[Message], with_state: bool
) -> None:
    db = SqliteStore(":memory:")
    store = db.checkpoints
    saved: list[Any] = []
    real = store.save

    def spy(turn_id: str, checkpoint: Any, *, fence: int | None = None) -> None:
        saved.append(checkpoint)
        real(turn_id, checkpoint, fence=fence)

    store.save = spy  # type: ignore[method-assign]
    checkpoints = TurnCheckpoints(store, durable=True)
    state = TurnState.start([Message.user("q")], session_id="s", turn_id="s.turn-1")
    if with_state:
        state.extra["state"] = {"n": [1, {"deep": "é\u2028"}]}
        state.extra["state_read"] = True
    for n, message in enumerate(results):
        state.results[f"call-{n}"] = message
        checkpoints.save_result(state, f"call-{n}")
        record = saved[-1]
        assert type(record) is EncodedObject and record.text is not None
        assert record.text == serde._ENCODER.encode(dict(record))
        assert json.loads(record.text)["results"].keys() == {f"call-{i}" for i in range(n + 1)}
    assert store.load(checkpoints._record_key or "") == json.loads(saved[-1].text)
    db.close()


def test_changing_an_encoded_object_drops_its_text() -> None:
    def fresh() -> EncodedObject:
        return EncodedObject({"a": 1}, '{"a":1}')

    changes: list[Callable[[EncodedObject], object]] = [
        lambda d: d.__setitem__("b", 2),
        lambda d: d.__delitem__("a"),
        lambda d: d.update(b=2),
        lambda d: d.setdefault("b", 2),
        lambda d: d.pop("a"),
        lambda d: d.popitem(),
        lambda d: d.clear(),
        lambda d: d.__ior__({"b": 2}),
    ]
    for change in changes:
        d = fresh()
        change(d)
        assert d.text is None
        assert serde.to_json(d, what="t") == serde._ENCODER.encode(dict(d))
    kept = fresh()
    kept.setdefault("a", 5)  # there already: nothing changed
    assert kept.text == '{"a":1}'
    for copied in (copy.deepcopy(fresh()), pickle.loads(pickle.dumps(fresh())), copy.copy(fresh())):
        assert dict(copied) == {"a": 1}
        assert serde.to_json(copied, what="t") == '{"a":1}'


def test_a_deeply_nested_message_is_checked_in_its_checkpoint_as_before() -> None:
    """A message nested too little to be refused alone but too deep inside a checkpoint is
    refused at the save, as when the checkpoint was encoded whole."""
    refused = 0
    for depth in range(serde.MAX_JSON_DEPTH - 8, serde.MAX_JSON_DEPTH):
        nested: Any = "x"
        for _ in range(depth):
            nested = [nested]
        message = Message.user("deep", metadata={"n": nested})
        try:
            serde.message_json(message)
        except ValueError:
            break  # too deep alone: no deeper one to try
        state = TurnState.start([message], session_id="s", turn_id="s.turn-1")
        try:  # the checkpoint encoded whole, as before
            serde.to_json(dict(turn_checkpoint(state)), what="checkpoint")
        except ValueError:
            checkpoint = turn_checkpoint(state, encoded=True)
            with pytest.raises(ValueError, match="nested more than"):
                MemoryCheckpointStore().save("s.turn-1", checkpoint)
            refused += 1
    assert refused >= 1  # some message was stored alone and refused in its checkpoint


def test_kept_texts_are_by_identity_and_bounded() -> None:
    first = Message.user("kept")
    twin = copy.copy(first)
    text = serde.kept_message_json(first, serde.message_to_dict(first))
    assert text == serde.message_json(twin)
    assert serde.known_valid(first) and not serde.known_valid(twin)
    for n in range(KEPT_LIMIT):
        other = Message.user(str(n))
        serde.kept_message_json(other, serde.message_to_dict(other))
    assert not serde.known_valid(first)  # the oldest went first


@tool
def lookup(q: str) -> str:
    """Look ``q`` up."""
    return "the tool's own answer " + q


def tool_then_answer(request: ModelRequest, n: int) -> Message:
    if n % 2 == 0:
        return Message.assistant("", tool_calls=[ToolCall(f"c{n}", "lookup", {"q": "zq"})])
    return Message.assistant("the final answer")


@pytest.mark.parametrize("kind", ["sqlite", "files", "memory"])
def test_a_turn_encodes_each_message_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: str
) -> None:
    """Its input is in both checkpoints and the transcript, the tool's answer in its result
    record and the transcript: each text is made once and spliced in after that. The memory
    stores splice nothing: the session store keeps the messages (encoding none a checkpoint
    held) and a checkpoint is encoded whole, its input in each."""
    store: Any
    if kind == "sqlite":
        store = SqliteStore(tmp_path / "s.db")
    elif kind == "files":
        store = file_store(tmp_path / "f")
    else:
        store = memory_store()
    agent = create_agent(provider=scripted(tool_then_answer), tools=[lookup], store=store)
    session = agent.session("s")
    made: list[str] = []
    real = serde._ENCODER

    class Counting:
        def encode(self, value: Any) -> str:
            text: str = real.encode(value)
            made.append(text)
            return text

    monkeypatch.setattr(serde, "_ENCODER", Counting())
    result = session.send("the unique question")
    assert result.finish_reason == "stop"
    everything = "\n".join(made)
    assert everything.count("the unique question") == (2 if kind == "memory" else 1)
    assert everything.count("the tool's own answer zq") == 1
    assert everything.count("the final answer") == 1
    assert [m.text for m in session.load()][::3] == ["the unique question", "the final answer"]
    again = agent.session("s")  # what was stored reads back
    assert again.load() == session.load()
    agent.close()


def test_a_message_noted_valid_has_no_text_until_one_is_made() -> None:
    """``remember_valid`` and the kept texts share one table: a noted message is known to
    encode, ``message_json`` still encodes it, and noting never drops a kept text."""
    noted = Message.user("noted")
    serde.remember_valid([noted])
    assert serde.known_valid(noted)
    assert serde.message_json(noted) == serde._ENCODER.encode(serde.message_to_dict(noted))
    text = serde.kept_message_json(noted, serde.message_to_dict(noted))
    assert text == serde.message_json(noted)
    serde.remember_valid([noted])  # already held, with its text: kept as it is
    kept = _kept_json.kept_text(noted)
    assert kept is not None and kept[1] == text
