"""Real processes sending to one session id through ``Session``: no turn is lost or unseen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fork_server
import pytest
import store_workers
from storekit import SHARED_KINDS, WAIT, open_kit

CTX = fork_server.CONTEXT


@pytest.mark.parametrize(
    ("processes", "turns"), [(6, 20), pytest.param(8, 150, marks=pytest.mark.slow)]
)
@pytest.mark.parametrize("kind", SHARED_KINDS)
def test_sessions_in_processes_lose_no_turn(
    kind: str, processes: int, turns: int, tmp_path: Path
) -> None:
    """Every turn is stored once, and every model saw every earlier message in order:
    with processes waiting in line, the turns that read ahead (SQLite) included."""
    location = tmp_path / "store"
    open_kit(kind, location).close()
    go = CTX.Event()
    out: Any = CTX.Queue()
    workers = [
        CTX.Process(
            target=store_workers.send_turns,
            args=(kind, str(location), "shared", n, turns, go, out),
        )
        for n in range(processes)
    ]
    for w in workers:
        w.start()
    go.set()
    # a deadline that grows with the work: the files store's lock polls under contention
    results = [out.get(timeout=WAIT * 2 * max(1, turns // 20)) for _ in workers]
    for w in workers:
        w.join(WAIT)
    assert [r for r in results if r[0] != "ok"] == []

    kit = open_kit(kind, location)
    messages = kit.sessions.load("shared") or []
    kit.close()
    assert len(messages) == 2 * processes * turns
    tags = []
    for i, (user, assistant) in enumerate(zip(messages[::2], messages[1::2], strict=True)):
        assert (user.role, assistant.role) == ("user", "assistant")
        # the model of every turn saw every earlier message, in order: none missed or repeated
        assert assistant.text == f"{user.text}|{store_workers.seen(messages[: 2 * i + 1])}"
        tags.append(user.text)
    assert sorted(tags) == sorted(f"w{w}-t{n}" for w in range(processes) for n in range(turns))
