"""Issue 16: recovery from a real Celery worker process on the machine's Redis broker.

A victim process is SIGKILLed inside a model call; a ``celery worker`` subprocess
(threads pool, 2 threads), given the sweep and resume tasks of
``lousho_sessions.celery``, finishes the turn. Per store (SQLite, PostgreSQL,
Redis): the sweep task fans out one ``resume_turn`` per stale turn; a resume task
delivered twice finishes the turn once (the other run reports ``"taken"``); a
stale fence is refused and runs nothing; beat alone, with nobody enqueuing, also
finishes a killed turn. Counted from the model's and the tool's side-effect logs.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from celery_agents import log_lines, make_app, open_store
from recovery_procs import WAIT, Child, celery_worker, kill_mid_sweep, kill_mid_turn, until
from services_pg import drop_schema, require_postgres
from services_redis import drop_prefix, prefix_for, require_redis

from lousho_sessions.recovery import StaleTurn, stale_turns

# one Celery worker per store kind per module: on one pytest-xdist worker (``make test`` runs ``--dist loadgroup``)
pytestmark = pytest.mark.xdist_group("test_celery")

ROLES = ["user", "assistant", "tool", "assistant"]


@attrs.define
class Rig:
    """One store kind's worker, its store opened in the test, and the app to send with."""

    root: Path
    spec: str
    prefix: str
    app: Any
    store: Any
    worker: Child

    def result(self, task_id: str) -> Any:
        """The task's return value; fails at once, with its output, if the worker died."""
        found = self.app.AsyncResult(task_id)
        until(
            lambda: found.ready() or self.worker.process.poll() is not None,
            f"task {task_id}",
            detail=self.worker.output,
        )
        assert found.ready(), (
            f"the worker exited ({self.worker.process.poll()}):\n{self.worker.output()}"
        )
        try:
            return found.get(timeout=WAIT)
        except Exception as exc:
            raise AssertionError(
                f"task {task_id}: {exc!r}\nworker:\n{self.worker.output()}"
            ) from exc

    def stale(self, turn_id: str) -> StaleTurn:
        """Wait until ``turn_id`` is listed as stale (a killed holder's lease ran out)."""
        found: list[StaleTurn] = []

        def listed() -> bool:
            found[:] = [t for t in stale_turns(self.store) if t.turn_id == turn_id]
            return bool(found)

        until(listed, f"{turn_id} listed by stale_turns")
        return found[0]

    def model_calls(self, session: str) -> list[str]:
        return [
            line for line in log_lines(self.root, "model-calls.log") if line.split()[0] == session
        ]

    def tool_runs(self, session: str) -> list[str]:
        return [
            line for line in log_lines(self.root, "tool-runs.log") if line.split()[0] == session
        ]

    def roles(self, session: str) -> list[str]:
        return [m.role for m in self.store.sessions.load(session) or []]


def store_spec(kind: str, root: Path) -> str:
    if kind == "sqlite":
        return "sqlite"
    if kind == "postgres":
        require_postgres()
        return f"postgres:{'t_' + prefix_for(root)[-16:]}"
    return f"redis:{prefix_for(root)}-store"


@pytest.fixture(scope="module", params=["sqlite", "postgres", "redis"])
def rig(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    require_redis()
    kind: str = request.param
    root = tmp_path_factory.mktemp(f"celery-{kind}")
    spec = store_spec(kind, root)
    prefix = prefix_for(root)
    store = open_store(root, spec)
    app = make_app(prefix)
    worker = celery_worker(root, spec, prefix)
    try:
        yield Rig(root, spec, prefix, app, store, worker)
        assert worker.stop() == 0, worker.output()
    finally:
        worker.stop(signal.SIGKILL)
        store.close()
        drop_prefix(prefix)
        if kind == "postgres":
            drop_schema(spec.partition(":")[2])
        elif kind == "redis":
            drop_prefix(spec.partition(":")[2])


def test_sweep_task_fans_out_and_the_worker_finishes_a_killed_turn(rig: Rig) -> None:
    kill_mid_turn(rig.root, rig.spec, "fan")
    rig.stale("fan.turn-0")
    swept = rig.result(rig.app.recovery.sweep.delay().id)
    mine = [e for e in swept["enqueued"] if e["turn_id"] == "fan.turn-0"]
    assert len(mine) == 1, swept
    outcome = rig.result(mine[0]["task_id"])
    assert outcome["outcome"] == "finished", outcome
    assert outcome["finish_reason"] == "stop"
    assert rig.roles("fan") == ROLES
    assert len(rig.model_calls("fan")) == 3  # the victim's, then the worker's two
    assert len(rig.tool_runs("fan")) == 1
    assert stale_turns(rig.store) == []


def test_resume_task_delivered_twice_finishes_the_turn_once(rig: Rig) -> None:
    kill_mid_turn(rig.root, rig.spec, "twice")
    turn = rig.stale("twice.turn-0")
    task = rig.app.recovery.resume_turn
    sent = [task.apply_async((turn.turn_id, turn.fence)) for _ in range(2)]
    outcomes = sorted(rig.result(s.id)["outcome"] for s in sent)
    assert outcomes == ["finished", "taken"], outcomes
    assert rig.roles("twice") == ROLES
    assert len(rig.model_calls("twice")) == 3
    assert len(rig.tool_runs("twice")) == 1


def test_resume_task_with_a_stale_fence_is_refused(rig: Rig) -> None:
    """A message queued before another claim of the turn (a sweeper that died since)."""
    kill_mid_turn(rig.root, rig.spec, "fenced")
    seen = rig.stale("fenced.turn-0")
    kill_mid_sweep(rig.root, rig.spec, "fenced")  # claims the turn (a new fence), then dies
    now = rig.stale("fenced.turn-0")
    assert now.fence != seen.fence and now.attempts == seen.attempts + 1, (seen, now)
    refused = rig.result(rig.app.recovery.resume_turn.delay(seen.turn_id, seen.fence).id)
    assert refused["outcome"] == "taken", refused
    assert len(rig.model_calls("fenced")) == 2  # the two victims': the stale message ran nothing
    assert rig.roles("fenced") == []
    finished = rig.result(rig.app.recovery.resume_turn.delay(now.turn_id, now.fence).id)
    assert finished["outcome"] == "finished", finished
    assert rig.roles("fenced") == ROLES
    assert len(rig.tool_runs("fenced")) == 1


def test_worker_reruns_an_idempotent_tool_a_kill_interrupted(rig: Rig) -> None:
    kill_mid_turn(rig.root, rig.spec, "tool", in_tool=True)
    rig.stale("tool.turn-0")
    swept = rig.result(rig.app.inline.sweep.delay().id)
    assert [s["outcome"] for s in swept["swept"] if s["session_id"] == "tool"] == ["finished"]
    assert rig.roles("tool") == ROLES
    runs = rig.tool_runs("tool")
    assert len(runs) == 2 and runs[0].split()[2] == runs[1].split()[2]  # one idempotency key
    assert len(rig.model_calls("tool")) == 2  # the recorded tool call was not asked for again


def test_worker_parks_a_non_idempotent_tool_a_kill_interrupted(rig: Rig) -> None:
    kill_mid_turn(rig.root, rig.spec, "charge", in_tool=True, text="please charge this")
    turn = rig.stale("charge.turn-0")
    parked = rig.result(rig.app.recovery.resume_turn.delay(turn.turn_id, turn.fence).id)
    assert parked["outcome"] == "parked", parked
    assert parked["finish_reason"] == "awaiting-approval"
    assert len(rig.tool_runs("charge")) == 1  # the victim's only: it may have charged
    assert rig.roles("charge") == []
    assert [t.turn_id for t in stale_turns(rig.store)] == []  # a human decides now
    [approval] = rig.store.approvals.list(session_id="charge", status="pending")
    assert approval["session_id"] == "charge"


def test_inline_sweep_task_resumes_in_the_sweep_itself(rig: Rig) -> None:
    kill_mid_turn(rig.root, rig.spec, "inline")
    rig.stale("inline.turn-0")
    swept = rig.result(rig.app.inline.sweep.delay().id)
    mine = [s for s in swept["swept"] if s["turn_id"] == "inline.turn-0"]
    assert [s["outcome"] for s in mine] == ["finished"], swept
    assert rig.roles("inline") == ROLES
    assert len(rig.tool_runs("inline")) == 1


def test_beat_alone_finishes_a_killed_turn(tmp_path: Path) -> None:
    """``celery worker -B`` with ``beat_entry(every=0.5)``: nobody enqueues by hand."""
    require_redis()
    prefix = prefix_for(tmp_path)
    kill_mid_turn(tmp_path, "sqlite", "beat")
    store = open_store(tmp_path, "sqlite")
    worker = celery_worker(
        tmp_path,
        "sqlite",
        prefix,
        "--beat",
        "--schedule",
        str(tmp_path / "beat-schedule"),
        LOUSHO_CELERY_BEAT="0.5",
    )
    try:
        until(
            lambda: len(store.sessions.load("beat") or []) == len(ROLES),
            "the beat-driven sweep finishing the turn",
            detail=worker.output,
        )
        assert [m.role for m in store.sessions.load("beat") or []] == ROLES
        assert worker.stop() == 0, worker.output()
    finally:
        worker.stop(signal.SIGKILL)
        store.close()
        drop_prefix(prefix)
    assert len(log_lines(tmp_path, "tool-runs.log")) == 1


def test_worker_killed_mid_resume_the_redelivered_task_is_taken(tmp_path: Path) -> None:
    """At-least-once for real: SIGKILL a worker inside its resume task; the broker
    redelivers the unacked message (``acks_late``, a 1 s ``visibility_timeout``) to the
    next worker, whose fence check refuses it; the next sweep finishes the turn."""
    require_redis()
    prefix = prefix_for(tmp_path)
    store = open_store(tmp_path, "sqlite")
    app = make_app(prefix)
    kill_mid_turn(tmp_path, "sqlite", "redeliver")
    [turn] = [t for t in stale_turns(store) if t.session_id == "redeliver"]
    (tmp_path / "hanging-redeliver").unlink()  # the victim's: wait for the worker's own
    first = celery_worker(
        tmp_path, "sqlite", prefix, LOUSHO_RECOVERY_HANG="1", LOUSHO_CELERY_VISIBILITY="1"
    )
    second: Child | None = None
    try:
        sent = app.recovery.resume_turn.delay(turn.turn_id, turn.fence)
        until(lambda: (tmp_path / "hanging-redeliver").exists(), "the worker's model call")
        first.stop(signal.SIGKILL)
        second = celery_worker(tmp_path, "sqlite", prefix, LOUSHO_CELERY_VISIBILITY="1")
        rig = Rig(tmp_path, "sqlite", prefix, app, store, second)
        redelivered = rig.result(sent.id)
        assert redelivered["outcome"] == "taken", redelivered  # the dead worker's claim holds
        assert rig.roles("redeliver") == []
        swept = rig.result(app.recovery.sweep.delay().id)
        [entry] = swept["enqueued"]
        assert rig.result(entry["task_id"])["outcome"] == "finished"
        assert rig.roles("redeliver") == ROLES
        assert len(rig.model_calls("redeliver")) == 4  # victim, dead worker, then two
        assert len(rig.tool_runs("redeliver")) == 1
        assert second.stop() == 0, second.output()
    finally:
        first.stop(signal.SIGKILL)
        if second is not None:
            second.stop(signal.SIGKILL)
        store.close()
        drop_prefix(prefix)


def test_the_celery_module_is_not_imported_by_the_root() -> None:
    code = "import sys, lousho_sessions\nassert 'celery' not in sys.modules\n"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=WAIT)
