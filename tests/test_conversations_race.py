"""Rewinds (and regenerates) racing turns sent by another process to the same session.

A child process (``rewind_race_child.py``) sends "0", "1", ... in a loop, each answered
"i:" by an echo model; this process rewinds the session at random points meanwhile, each
rewind under the session's lease like a turn. Afterwards the transcript is well formed
(user "i" then assistant "i:", numbers rising, none twice, nothing half-written) and every
turn the child saw succeed is in it or was removed by a rewind that returned it.
"""

from __future__ import annotations

import os
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fork_server
import pytest
from history_stores import cleanup, open_store, require

from lousho_sessions import FunctionProvider, Message, create_agent

TESTS = Path(__file__).parent
#: turns the child sends; rewinds are made while it runs (bounded by its turns)
TURNS = 40
DEADLINE = 60.0  # seconds the whole race may take before the test fails


@pytest.fixture(params=["sqlite", "files", "postgres", "redis"])
def kind(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    require(request.param)
    yield request.param
    cleanup(request.param, tmp_path)


class Child:
    """The child process and the lines it printed, read by a thread of this process."""

    def __init__(self, kind: str, path: Path) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        }
        self.process = fork_server.Popen(
            [str(TESTS / "rewind_race_child.py"), kind, str(path), str(TURNS)],
            stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        self.lines: list[str] = []
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self.changed:
                self.lines.append(line.strip())
                self.changed.notify_all()
        with self.changed:
            self.lines.append("exited")
            self.changed.notify_all()

    def wait_for(self, seen: int, deadline: float) -> list[str]:
        """The lines once there are more than ``seen`` (fails at ``deadline``)."""
        with self.changed:
            ok = self.changed.wait_for(
                lambda: len(self.lines) > seen, timeout=max(deadline - time.monotonic(), 0)
            )
            assert ok, f"the child printed nothing new in time: {self.lines[-3:]}"
            return list(self.lines)

    @property
    def finished(self) -> bool:
        with self.changed:
            return "done" in self.lines or "exited" in self.lines

    def close(self) -> None:
        self.process.kill()
        self.process.wait(30)
        self.reader.join(30)
        assert self.process.stdout is not None
        self.process.stdout.close()


def user_number(message: Message) -> int:
    assert message.role == "user", message
    return int(message.text)


def check_well_formed(messages: list[Message] | tuple[Message, ...], what: str) -> list[int]:
    """The user numbers of ``messages``: pairs of user "i" and assistant "i:", else it fails."""
    assert len(messages) % 2 == 0, f"{what}: a half-written turn: {[m.text for m in messages]}"
    numbers = []
    for user, reply in zip(messages[::2], messages[1::2], strict=True):
        number = user_number(user)
        assert reply.role == "assistant" and reply.text == f"{number}:", (what, user, reply)
        numbers.append(number)
    return numbers


def race(kind: str, tmp_path: Path, regenerate: bool) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    store = open_store(kind, tmp_path)
    agent = create_agent(
        provider=FunctionProvider(lambda r: f"{r.messages[-1].text}:"), store=store
    )
    session = agent.session("s1")
    sessions: Any = store.sessions
    deadline = time.monotonic() + DEADLINE
    child = Child(kind, tmp_path)
    removed: list[Message] = []
    rewinds = regenerated = 0
    try:
        lines = child.wait_for(0, deadline)
        assert lines[0] == "ready", lines
        seen = 1
        while not child.finished:
            lines = child.wait_for(seen, deadline)  # the child's progress, then a random act
            seen = len(lines)
            # the first round does each kind of act once (on a loaded machine the child may
            # get far between two rounds): a rewind, then (``regenerate``) a regenerate; then
            # random acts, regenerates mostly
            due = (not rewinds) + (regenerate and not regenerated)
            acts = max(rng.choice([0, 1, 1, 2]), due)
            for _ in range(acts):
                stored = sessions.load("s1") or []
                users = [m for m in stored if m.role == "user"]
                if not users:
                    continue
                if regenerate and rewinds and (not regenerated or rng.random() < 0.8):
                    result = session.regenerate()  # its reply is "i:" again, for the last user "i"
                    assert result.text.endswith(":"), result.text
                    regenerated += 1
                    continue
                target = rng.choice(users)
                # by id or by index: both are stable, only this process removes messages
                to: int | str = target.id if rng.random() < 0.5 else stored.index(target)
                gone = session.rewind(to)
                assert gone and gone[0].id == target.id, (seed, to, [m.text for m in gone])
                check_well_formed(gone, f"removed by rewind({to!r}) (seed {seed})")
                removed += gone
                rewinds += 1
        lines = child.wait_for(seen - 1, deadline)
        assert child.process.wait(max(deadline - time.monotonic(), 1)) == 0
    finally:
        child.close()
    errors = [line for line in lines if line.startswith("err")]
    assert not errors, f"the child's turns failed (seed {seed}): {errors}"
    succeeded = {int(line.split()[1]) for line in lines if line.startswith("ok")}
    assert succeeded == set(range(TURNS)), lines
    final = sessions.load("s1") or []
    numbers = check_well_formed(final, f"the final transcript (seed {seed})")
    assert numbers == sorted(set(numbers)), f"out of order or twice (seed {seed}): {numbers}"
    returned = {user_number(m) for m in removed if m.role == "user"}
    missing = sorted(succeeded - set(numbers) - returned)
    assert not missing, f"turns neither kept nor returned by a rewind (seed {seed}): {missing}"
    assert not {m.id for m in removed} & {m.id for m in final}, "a removed message came back"
    assert rewinds > 0, f"no rewind raced the child (seed {seed})"
    if regenerate:
        assert regenerated > 0, f"no regenerate raced the child (seed {seed})"
    agent.close()
    close = getattr(store, "close", None)
    if callable(close):
        close()


def test_rewinds_racing_turns_from_another_process(kind: str, tmp_path: Path) -> None:
    race(kind, tmp_path, regenerate=False)


def test_regenerates_racing_turns_from_another_process(kind: str, tmp_path: Path) -> None:
    """A regenerate is one job under one lease: no turn of another process lands between
    its rewind and its new turn (which would put an older number after a newer one)."""
    race(kind, tmp_path, regenerate=True)
