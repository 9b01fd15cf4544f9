"""Bodies of the worker processes the multi-process tests start (forked from tests/fork_server.py)."""

from __future__ import annotations

import traceback
import zlib
from collections.abc import Sequence
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from storekit import WAIT, open_kit

from lousho_sessions.messages import Message


def run_turns(
    kind: str, location: str, session_id: str, worker: int, turns: int, go: Event, out: Queue[Any]
) -> None:
    """``turns`` turns on one session: under the turn lock, reload if another wrote, append."""
    try:
        kit = open_kit(kind, Path(location))
        known: list[Message] = []
        revision: object = None
        assert go.wait(WAIT)
        for n in range(turns):
            with kit.sessions.turn_lock(session_id, timeout=WAIT):
                current = kit.sessions.revision(session_id)
                if current != revision:
                    known = kit.sessions.load(session_id) or []
                tag = f"w{worker}-t{n}"
                new = [Message.user(tag), Message.assistant(tag)]
                kit.sessions.append(session_id, new, len(known))
                known = known + new
                revision = kit.sessions.revision(session_id)
        kit.close()
        out.put(("ok", worker))
    except BaseException:
        out.put(("error", traceback.format_exc()))


def hold_turn_lock(kind: str, location: str, session_id: str, held: Event, never: Event) -> None:
    """Take the session's turn lock, say so, then wait to be killed."""
    kit = open_kit(kind, Path(location))
    with kit.sessions.turn_lock(session_id):
        held.set()
        never.wait(WAIT)  # returns only if the test failed to kill this process


def hold_write_transaction(location: str, held: Event, never: Event) -> None:
    """Open a SQLite write transaction, say so, then wait to be killed in the middle of it."""
    from lousho_sessions.sqlite import SqliteStore

    store = SqliteStore(Path(location) / "store.db")
    with store.transaction() as conn:
        conn.execute("INSERT INTO checkpoints VALUES ('x.turn-0', '{}', 0)")
        held.set()
        never.wait(WAIT)


def seen(messages: Sequence[Message]) -> str:
    """How many messages, and a digest of their texts in order: what a model was shown."""
    texts = "\n".join(m.text for m in messages).encode()
    return f"{len(messages)}|{zlib.crc32(texts):08x}"


def send_turns(
    kind: str, location: str, session_id: str, worker: int, turns: int, go: Event, out: Queue[Any]
) -> None:
    """``turns`` ``session.send`` calls; the model answers with what it saw."""
    try:
        from lousho_sessions import FunctionProvider, create_agent
        from lousho_sessions.providers.base import ModelRequest

        def model(request: ModelRequest) -> str:
            # the tag of this turn, how many messages the model was shown, and which
            return f"{request.messages[-1].text}|{seen(request.messages)}"

        kit = open_kit(kind, Path(location))
        agent = create_agent(provider=FunctionProvider(model), store={"sessions": kit.sessions})
        session = agent.session(session_id)
        assert go.wait(WAIT)
        for n in range(turns):
            session.send(f"w{worker}-t{n}", timeout=WAIT)
        session.close()
        agent.close()
        kit.close()
        out.put(("ok", worker))
    except BaseException:
        out.put(("error", traceback.format_exc()))
