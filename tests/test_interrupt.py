"""Ctrl-C (SIGINT, as a Jupyter interrupt sends) while a blocking call waits for its turn.

A real child process (``interrupt_child.py``) blocks in ``send()``, ``resume()`` or
``approvals.resolve()`` inside a model call that ends only when the turn is aborted,
and says so on its stdout; the test then sends it SIGINT. The call must abort the turn
and raise ``KeyboardInterrupt``, leave the transcript as it was, and leave nothing
running: the child's next ``send()`` gets its answer at once (an interrupted turn that
kept running would hold the session's queue for 30 s, past the read timeout here).
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from lousho_sessions.runtime._worker import Job, Workers

CHILD = str(Path(__file__).with_name("interrupt_child.py"))
READ_TIMEOUT = 20.0  # seconds; less than the 30 s an un-aborted model call holds the worker


class Child:
    """The child process and its stdout, read line by line on a thread (no sleeps)."""

    def __init__(self, call: str, when: str) -> None:
        # a real interpreter, not the fork server: Ctrl-C as a user's process receives it
        self.proc = subprocess.Popen(
            [sys.executable, CHILD, call, when],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next(self) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=READ_TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"the child said nothing for {READ_TIMEOUT} s") from None
        if line is None:
            self.proc.wait(10)
            stderr = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"the child ended ({self.proc.returncode}): {stderr}")
        data: dict[str, Any] = json.loads(line)
        return data


@contextmanager
def child(call: str, when: str = "waiting") -> Iterator[Child]:
    c = Child(call, when)
    try:
        yield c
    finally:
        if c.proc.poll() is None:
            c.proc.kill()
        c.proc.wait(10)
        c.reader.join(10)  # at the end of its output, now that the child has ended
        for pipe in (c.proc.stdout, c.proc.stderr):
            if pipe is not None:
                pipe.close()


CALLS = ["session-send", "agent-send", "session-resume", "resolve"]


@pytest.mark.parametrize("call", CALLS)
def test_sigint_aborts_the_turn_and_raises(call: str) -> None:
    with child(call) as c:
        assert c.next() == {"at": "blocked"}  # inside the model call
        c.proc.send_signal(signal.SIGINT)
        check_interrupted(c, call)


@pytest.mark.parametrize("call", CALLS)
def test_sigint_just_after_the_turn_was_queued_aborts_it(call: str) -> None:
    """Ctrl-C between queueing the turn and waiting for it (the turn already in its model
    call, as when the OS runs the worker first on a loaded machine) stops it all the same:
    the child raises SIGINT on its main thread as soon as the turn is queued and blocked.
    It used to leave the turn running unwaited-for: saved, though the caller was told it was
    interrupted, and holding the session's queue (the flaky failure of the test above)."""
    with child(call, "queued") as c:
        assert c.next() == {"at": "blocked"}
        check_interrupted(c, call)


def check_interrupted(c: Child, call: str) -> None:
    """The call raised KeyboardInterrupt, the turn was aborted, nothing is left running."""
    outcome = c.next()
    assert outcome["at"] == "interrupted", outcome
    # the turn was aborted, not saved: the transcript holds only the first exchange
    assert outcome["transcript"] == ["hello", "answer to hello"]
    # an aborted turn is dropped, checkpoint and all, unless its approved tool ran: then
    # it stays pending, and the next send() finishes it first without running it again
    kept = call in ("session-resume", "resolve")
    assert outcome["pending"] is kept
    after = c.next()  # within READ_TIMEOUT: the interrupted turn no longer holds the queue
    assert after["at"] == "next"
    assert after["text"] == "answer to next"
    assert after["model_saw_abort"] is True
    expected = ["hello", "answer to hello"]
    if kept:
        expected += ["delete", "", "deleted x", "answer to deleted x"]
    if call != "agent-send":
        expected += ["next", "answer to next"]
    assert after["transcript"] == expected
    assert c.proc.wait(30) == 0


def test_sigint_after_the_turn_was_saved_returns_its_result() -> None:
    """What the store holds is what you are told: a saved turn is returned, not interrupted."""
    with child("saved") as c:
        assert c.next() == {"at": "blocked"}  # the turn's messages are in the store
        c.proc.send_signal(signal.SIGINT)
        outcome = c.next()
        assert outcome == {
            "at": "returned",
            "text": "answer to quick",
            "reason": "stop",
            "transcript": ["hello", "answer to hello", "quick", "answer to quick"],
        }
        after = c.next()
        assert after["text"] == "answer to next" and len(after["transcript"]) == 6
        assert c.proc.wait(30) == 0


def test_a_job_never_queued_is_withdrawn_once() -> None:
    """A Ctrl-C inside ``submit`` before the job was queued: the call's stop withdraws it (and
    settles its Future), so the call does not wait for a job no thread will ever run."""
    workers = Workers()
    try:
        never = Job(lambda job: "ran")
        assert workers.withdraw("k", never) is True
        assert workers.withdraw("k", never) is False  # once: its Future is settled once
        ran = Job(lambda job: "ran")
        workers.submit("k", ran)
        assert ran.future.result(10) == "ran"
        assert workers.withdraw("k", ran) is False  # it ran
    finally:
        assert workers.close(10)
