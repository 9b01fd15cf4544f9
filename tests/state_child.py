"""A process incrementing a counter in a session's state (or a scope's) many times.

``python state_child.py KIND PATH COUNT session|scope``: opens the store of ``KIND`` under
``PATH``, waits for a line on stdin (so two children start together), then adds 1 to
``state["n"]`` of session "s1" (or of the scope "user-42") ``COUNT`` times with
``update_state`` and prints ``done``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from history_stores import open_store

from lousho_sessions import ScriptedProvider, create_agent


def bump(state: dict[str, Any]) -> None:
    state["n"] = state.get("n", 0) + 1


def main() -> None:
    kind, path, count, what = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    store = open_store(kind, path)
    agent = create_agent(provider=ScriptedProvider([]), store=store)
    target: Any = agent.session("s1") if what == "session" else agent.state_scope("user-42")
    print("ready", flush=True)
    sys.stdin.readline()
    for _ in range(count):
        target.update_state(bump)
    agent.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
