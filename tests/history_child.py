"""A process rewinding and forking one session in a tight loop until it is killed.

``python history_child.py KIND PATH``: the session "src" holds ``N`` messages (and a
state); each round forks it with its state to ``f<round>`` keeping ``round % N`` messages,
rewinds it to ``round % N`` and appends the rest back, printing the round when done.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

from history_stores import open_store

from lousho_sessions import Message
from lousho_sessions.stores.adapters import sessions_contract, store_parts
from lousho_sessions.stores.base import ForkRequest, RewindRequest

__all__ = ["ORIGINAL", "STATE", "N"]

N = 40
AT = datetime(2025, 1, 1, tzinfo=timezone.utc)
ORIGINAL = [Message.user(f"m{i}", id=f"m{i}", created_at=AT) for i in range(N)]
#: the state of "src", which every fork copies
STATE = {"plan": "pro", "seen": list(range(5))}


def main() -> None:
    kind, path = sys.argv[1], Path(sys.argv[2])
    parts = store_parts(open_store(kind, path))
    assert parts.sessions is not None
    sessions = sessions_contract(parts.sessions)
    round = 0
    print("ready", flush=True)
    while True:
        keep = round % N
        sessions.fork(ForkRequest("src", f"f{round}", keep, True, parts.checkpoints))
        sessions.rewind(RewindRequest("src", keep))
        sessions.append("src", ORIGINAL[keep:], keep)
        print(round, flush=True)
        round += 1


if __name__ == "__main__":
    main()
