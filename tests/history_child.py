"""A process rewinding and forking one session in a tight loop until it is killed.

``python history_child.py KIND PATH``: the session "src" holds ``N`` messages; each round
forks it to ``f<round>`` keeping ``round % N`` messages, rewinds it to ``round % N`` and
appends the rest back, printing the round when done.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

from history_stores import open_store

from lousho_sessions import Message
from lousho_sessions.stores.adapters import sessions_contract, store_parts
from lousho_sessions.stores.base import ForkRequest, RewindRequest

N = 40
AT = datetime(2025, 1, 1, tzinfo=timezone.utc)
ORIGINAL = [Message.user(f"m{i}", id=f"m{i}", created_at=AT) for i in range(N)]


def main() -> None:
    kind, path = sys.argv[1], Path(sys.argv[2])
    part = store_parts(open_store(kind, path)).sessions
    assert part is not None
    sessions = sessions_contract(part)
    round = 0
    print("ready", flush=True)
    while True:
        keep = round % N
        sessions.fork(ForkRequest("src", f"f{round}", keep))
        sessions.rewind(RewindRequest("src", keep))
        sessions.append("src", ORIGINAL[keep:], keep)
        print(round, flush=True)
        round += 1


if __name__ == "__main__":
    main()
