"""What the kit's tests and machines share: opening and closing the store, skipping, sample data."""

from __future__ import annotations

import unittest
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import attrs

from ..messages import ImagePart, Message, TextPart, ToolCall, Usage
from ..stores.adapters import (
    approvals_contract,
    checkpoints_contract,
    sessions_contract,
    store_parts,
)
from ..stores.base import (
    AgentStore,
    BaseApprovalStore,
    BaseCheckpointStore,
    BaseSessionStore,
)

#: Seconds any wait on another thread or process may take before a test fails.
WAIT = 30.0


def skip(reason: str) -> NoReturn:
    """Skip the running test: ``pytest.skip`` under pytest, else ``unittest.SkipTest``."""
    try:
        import pytest
    except ImportError:
        raise unittest.SkipTest(reason) from None
    pytest.skip(reason)


@contextmanager
def raises(*types: type[BaseException]) -> Iterator[list[BaseException]]:
    """Assert the block raises one of ``types``; the list it yields then holds the error."""
    caught: list[BaseException] = []
    try:
        yield caught
    except types as exc:
        caught.append(exc)
        return
    raise AssertionError(f"expected {' or '.join(t.__name__ for t in types)}, nothing was raised")


@attrs.frozen
class Parts:
    """The store's parts under the contract (``None``: the store has no such part)."""

    sessions: BaseSessionStore | None
    checkpoints: BaseCheckpointStore | None
    approvals: BaseApprovalStore | None


def close_made(made: object, parts: Parts) -> None:
    """Close what ``make_store`` returned: its own ``close()`` if it has one, else each part's."""
    close = getattr(made, "close", None)
    if not isinstance(made, AgentStore) and callable(close):
        close()
        return
    seen: list[object] = []
    for part in (parts.sessions, parts.checkpoints, parts.approvals):
        if part is not None and not any(part is s for s in seen):
            seen.append(part)
            part.close()


@contextmanager
def opened(factory: Callable[[Path], Any], path: Path) -> Iterator[Parts]:
    """The parts of ``factory(path)``, adapted to the contract, closed afterwards."""
    made = factory(path)
    found = store_parts(made)
    parts = Parts(
        None if found.sessions is None else sessions_contract(found.sessions),
        None if found.checkpoints is None else checkpoints_contract(found.checkpoints),
        None if found.approvals is None else approvals_contract(found.approvals),
    )
    try:
        yield parts
    finally:
        close_made(made, parts)


def tracks_revisions(sessions: BaseSessionStore) -> bool:
    """Whether ``revision`` tells something: the default returns a new object on every call."""
    first, second = sessions.revision("kit-probe"), sessions.revision("kit-probe")
    return first == second


def turn(n: int) -> list[Message]:
    """A user message and an assistant reply with usage."""
    return [Message.user(f"q{n}"), Message.assistant(f"a{n}", usage=Usage(3, 4, 0.01))]


def texts(messages: list[Message] | None) -> list[str]:
    return [m.text for m in messages or []]


def rich_message() -> Message:
    """An assistant message with every kind of part: text, image bytes, a tool call, metadata."""
    return Message.assistant(
        (TextPart("see"), ImagePart(data=b"\x00\xffpng", media_type="image/png")),
        tool_calls=(ToolCall("c1", "lookup", {"q": ["x", 1, None], "deep": {"a": 1.5}}),),
        usage=Usage(10, 20, 0.25),
        metadata={"trace": "t-1"},
    )


def approval(
    id: str, session_id: str = "s1", created_at: str = "2025-01-01T00:00:00"
) -> dict[str, Any]:
    """A pending approval record with a field no release knows, which must come back unchanged."""
    return {
        "id": id,
        "session_id": session_id,
        "status": "pending",
        "created_at": created_at,
        "call": {"id": "c1", "name": "delete_file", "arguments": {"path": "/tmp/x"}},
        "future_field": [1, {"x": None}],
    }
