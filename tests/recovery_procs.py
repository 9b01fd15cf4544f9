"""Processes of the recovery tests: a victim killed mid-turn, a Celery worker, a sweeper.

Each is a real subprocess given the environment ``celery_agents`` reads; every wait
is bounded by a deadline and none sleeps: ``until`` polls through ``Event.wait``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import fork_server

TESTS = Path(__file__).parent
WAIT = 60.0


def until(
    condition: Callable[[], bool],
    what: str,
    timeout: float = WAIT,
    *,
    detail: Callable[[], str] | None = None,
) -> None:
    """Poll ``condition`` until true; fail naming ``what`` (and ``detail()``, e.g. a
    process's output, as it is then) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"not within {timeout} s: {what}" + ("" if detail is None else "\n" + detail())
            )
        pause.wait(0.02)


def environment(root: Path, store: str, **extra: str) -> dict[str, str]:
    """The environment of a test process: ``celery_agents`` importable, the test's store."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOUSHO_CELERY")}
    env.pop("LOUSHO_RECOVERY_HANG", None)
    # set by the Django example's tests when collected: Celery's Django fix-up would load it
    env.pop("DJANGO_SETTINGS_MODULE", None)
    path = [str(TESTS), env.get("PYTHONPATH", "")]
    env.update(
        PYTHONPATH=os.pathsep.join(p for p in path if p),
        LOUSHO_RECOVERY_DIR=str(root),
        LOUSHO_RECOVERY_STORE=store,
        **extra,
    )
    return env


def kill_in_model(root: Path, store: str, session: str, code: str, where: str = "1") -> int:
    """Run ``code`` in a process whose model (``where="tool"``: whose tools) hang, SIGKILL
    it inside that call; its pid."""
    marker = root / f"hanging-{session}"
    marker.unlink(missing_ok=True)
    victim = fork_server.Popen(
        ["-c", code],
        env=environment(root, store, LOUSHO_RECOVERY_HANG=where),
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        until(
            lambda: marker.exists() or victim.poll() is not None,
            f"the victim's model call on {session}",
        )
        assert victim.poll() is None, victim.stderr.read().decode() if victim.stderr else ""
        os.kill(victim.pid, signal.SIGKILL)
        assert victim.wait(timeout=WAIT) == -signal.SIGKILL
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait(timeout=WAIT)
        if victim.stderr is not None:
            victim.stderr.close()
    return victim.pid


def kill_mid_turn(
    root: Path, store: str, session: str, *, in_tool: bool = False, text: str = "please record this"
) -> int:
    """Start a turn on ``session`` in a process, SIGKILL it inside the model call (or the
    tool call); its pid."""
    code = (
        "from celery_agents import make_agent\n"
        f"make_agent().session({session!r}).send({session + ' ' + text!r})\n"
    )
    return kill_in_model(root, store, session, code, "tool" if in_tool else "1")


def kill_mid_sweep(root: Path, store: str, session: str) -> int:
    """Sweep in a process that claims ``session``'s stale turn and dies in its model call."""
    code = (
        "from celery_agents import make_agent, make_store\n"
        "from lousho_sessions.recovery import sweep\n"
        "store = make_store()\n"
        "sweep(store, agent=make_agent(store))\n"
    )
    return kill_in_model(root, store, session, code)


class Child:
    """A subprocess whose output goes to a file; ``stop()`` ends it (SIGTERM, then SIGKILL)."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: Path, log: Path) -> None:
        self.log = log
        self._out: IO[bytes] = open(log, "wb")  # noqa: SIM115 - closed by stop()
        self.process = subprocess.Popen(
            command, env=env, cwd=cwd, stdout=self._out, stderr=subprocess.STDOUT
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = WAIT) -> int:
        """Send ``sig`` and wait; SIGKILL if it has not exited within ``timeout``. Its code."""
        try:
            if self.process.poll() is None:
                self.process.send_signal(sig)
            try:
                return self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired as exc:
                self.process.kill()
                self.process.wait(timeout=WAIT)
                raise AssertionError(
                    f"{self.process.args!r} ignored {sig!r}:\n{self.output()}"
                ) from exc
        finally:
            self._out.close()


def celery_worker(root: Path, store: str, prefix: str, *extra: str, **env: str) -> Child:
    """``celery -A celery_agents:app worker`` on the test's queue: 2 threads, no remote control."""
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "celery_agents:app",
        "worker",
        "--pool=threads",
        "--concurrency=2",
        "--queues",
        prefix,
        "--hostname",
        f"{prefix}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "--loglevel=INFO",
        *extra,
    ]
    return Child(
        command,
        environment(root, store, LOUSHO_CELERY_PREFIX=prefix, **env),
        root,
        root / f"worker-{len(list(root.glob('worker-*.log')))}.log",
    )


def sweeper(root: Path, store: str, *args: str) -> Child:
    """``python sweeper_child.py ARGS`` (``run_sweeper`` over the test's store)."""
    return Child(
        [sys.executable, str(TESTS / "sweeper_child.py"), *args],
        environment(root, store),
        root,
        root / "sweeper.log",
    )
