"""SIGKILL during rewind and fork: the session is whole before or after, never between; a
fork made in one write (SQLite, PostgreSQL, Redis) has its state from the start."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fork_server
import pytest
from history_child import ORIGINAL, STATE
from history_stores import SHARED, cleanup, open_store, require

from lousho_sessions.stores.adapters import store_parts
from lousho_sessions.stores.base import RewindRequest, SaveState

TESTS = Path(__file__).parent


@pytest.fixture(params=SHARED)
def kind(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    require(request.param)
    yield request.param
    cleanup(request.param, tmp_path)


@pytest.mark.parametrize("after", [3, 17])
def test_killed_mid_rewind_or_fork_leaves_whole_sessions(
    kind: str, tmp_path: Path, after: int
) -> None:
    made = open_store(kind, tmp_path)
    sessions: Any = store_parts(made).sessions
    checkpoints = store_parts(made).checkpoints
    sessions.save("src", ORIGINAL)
    sessions.save_state(SaveState("src", STATE, 0, None, checkpoints))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    child = fork_server.Popen(
        [str(TESTS / "history_child.py"), kind, str(tmp_path)],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert child.stdout is not None
    try:
        for line in child.stdout:  # let it run `after` rounds, then kill it mid-write
            if line.strip() == str(after):
                break
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait(30)
        child.stdout.close()
    # src: a prefix of the original (killed between its rewind and its append) or all of it
    src = sessions.load("src")
    assert src is not None and src == ORIGINAL[: len(src)]
    info = sessions.info("src")
    assert info is not None and info.messages == len(src)
    for n in range(after + 3):  # every fork made is whole, with its parent named
        fork = sessions.load(f"f{n}")
        if fork is None:
            assert n > after, f"fork f{n} of a finished round is missing"
            continue
        assert fork == ORIGINAL[: n % len(ORIGINAL)], f"f{n} is not whole"
        state = sessions.load_state(f"f{n}", checkpoints)[0]
        # copied in the fork's write, or (files: a file of its own) just after it
        assert state == STATE or (kind == "files" and n > after and state == {}), (n, state)
        info = sessions.info(f"f{n}")
        assert info is not None and info.messages == len(fork)
        if info.parent is not None:
            assert (info.parent, info.fork_point) == ("src", len(fork))
    sessions.rewind(RewindRequest("src", 0))  # still writable: no lock or row left behind
    assert sessions.load("src") == []
    close = getattr(made, "close", None)
    if callable(close):
        close()
