"""Issue 16: the sweeper loop for deployments without a queue (``run_sweeper``), and
``load_object``/``resolve_agent``/``resolve_store``, the import paths a worker is given.

The loop runs in a process of its own (tests/sweeper_child.py) over a SQLite file
whose turn was abandoned by a SIGKILLed process; SIGTERM and SIGINT stop it cleanly.
"""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

import pytest
from celery_agents import log_lines, make_agent, open_store
from recovery_procs import WAIT, kill_mid_turn, sweeper, until

from lousho_sessions import LoushoError, create_agent, memory_store
from lousho_sessions.admin._sweeper import (
    SweeperTotals,
    load_object,
    resolve_agent,
    resolve_store,
    run_sweeper,
)
from lousho_sessions.sqlite import SqliteStore

ROLES = ["user", "assistant", "tool", "assistant"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sweeper_process_finishes_a_killed_turn_and_stops_on_a_signal(
    tmp_path: Path, sig: signal.Signals
) -> None:
    kill_mid_turn(tmp_path, "sqlite", "loop")
    child = sweeper(tmp_path, "sqlite", "0.1")
    try:
        until(
            lambda: "swept loop.turn-0 finished" in child.output(),
            "the sweeper finishing the turn",
            detail=child.output,
        )
        assert child.stop(sig) == 0, child.output()
    finally:
        child.stop(signal.SIGKILL)
    lines = child.output().splitlines()
    totals = json.loads(next(line for line in lines if line.startswith("totals "))[7:])
    assert totals["finished"] == 1 and totals["errors"] == 0, totals
    assert totals["rounds"] >= 1
    with SqliteStore(tmp_path / "agent.db") as store:
        assert [m.role for m in store.sessions.load("loop") or []] == ROLES
    assert len(log_lines(tmp_path, "tool-runs.log")) == 1


def test_sweeper_stops_after_rounds_and_when_the_event_is_set(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "agent.db") as store:
        agent = create_agent(store=store)
        assert run_sweeper(store, agent=agent, every=0.01, rounds=3) == SweeperTotals(rounds=3)
        stop = threading.Event()
        done: list[SweeperTotals] = []
        loop = threading.Thread(
            target=lambda: done.append(run_sweeper(store, agent=agent, every=0.01, stop=stop))
        )
        loop.start()
        stop.set()
        loop.join(WAIT)
        assert not loop.is_alive() and done and done[0].errors == 0
        agent.close()


def test_a_sweep_that_raises_is_counted_and_the_loop_goes_on(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "agent.db")
    agent = create_agent(store=store)
    store.close()  # every sweep now raises StoreClosedError
    totals = run_sweeper(store, agent=agent, every=0.01, rounds=2)
    assert totals == SweeperTotals(rounds=2, errors=2)
    agent.close()


@pytest.mark.parametrize("every", [0, -1, float("nan"), float("inf"), "30", True])
def test_sweeper_rejects_a_bad_interval(tmp_path: Path, every: object) -> None:
    agent = create_agent(store=memory_store())
    with pytest.raises(LoushoError, match="every must be seconds"):
        run_sweeper(agent.store, agent=agent, every=every, rounds=1)  # type: ignore[arg-type]
    agent.close()


def test_load_object_follows_a_path_and_names_what_is_missing() -> None:
    assert load_object("celery_agents:make_agent") is make_agent
    assert load_object("lousho_sessions.sqlite:SqliteStore.close") is SqliteStore.close
    for bad in ("celery_agents", "celery_agents:", ":make_agent", "a:b:c", "mod:not-an-id"):
        with pytest.raises(LoushoError, match="expected an import path"):
            load_object(bad)
    with pytest.raises(LoushoError, match="cannot import module 'no_such_module_x'") as caught:
        load_object("no_such_module_x:agent")
    assert isinstance(caught.value.__cause__, ImportError)
    with pytest.raises(LoushoError, match="has no attribute 'missing'"):
        load_object("celery_agents:missing")


def test_resolve_agent_and_store_take_objects_paths_and_factories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOUSHO_RECOVERY_DIR", str(tmp_path))
    monkeypatch.setenv("LOUSHO_RECOVERY_STORE", "sqlite")
    built = resolve_agent("celery_agents:make_agent")  # a factory, by path
    assert built.tools.keys() == {"record", "charge"}
    assert resolve_agent(built) is built
    assert resolve_agent(lambda: built) is built
    assert resolve_store(None, built) is built.store
    store = open_store(tmp_path, "sqlite")
    assert resolve_store(store, built) is store
    assert resolve_store(lambda: store, built) is store
    made = resolve_store("celery_agents:make_store", built)
    assert isinstance(made, SqliteStore)
    for part in (store, made):
        part.close()
    with pytest.raises(LoushoError, match="expected an Agent"):
        resolve_agent("celery_agents:LEASE_TTL")
    with pytest.raises(LoushoError, match="expected a store with checkpoints"):
        resolve_store("celery_agents:LEASE_TTL", built)
    no_checkpoints = create_agent()
    with pytest.raises(LoushoError, match="no store with checkpoints"):
        resolve_store(None, no_checkpoints)
    for agent in (built, no_checkpoints):
        agent.close()
