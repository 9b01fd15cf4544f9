"""``run_sweeper`` in a process of its own (tests/test_sweeper.py): ``EVERY [ROUNDS]``.

It builds the agent of ``celery_agents`` (store from the environment), prints
``swept <turn id> <outcome>`` per turn as it goes and ``totals <json>`` at the end.
"""

from __future__ import annotations

import json
import sys

import attrs
from celery_agents import make_agent, make_store

from lousho_sessions.admin._sweeper import run_sweeper
from lousho_sessions.recovery import SweptTurn


def report(turn: SweptTurn) -> None:
    print(f"swept {turn.turn_id} {turn.outcome}", flush=True)


def main() -> None:
    every = float(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else None
    store = make_store()
    agent = make_agent(store)
    print("ready", flush=True)
    totals = run_sweeper(store, agent=agent, every=every, on_swept=report, rounds=rounds)
    print("totals " + json.dumps(attrs.asdict(totals)), flush=True)
    agent.close()
    store.close()


if __name__ == "__main__":
    main()
