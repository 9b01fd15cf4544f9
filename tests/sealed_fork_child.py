"""A process forking an encrypted Redis session (its records sealed again for the new id),
to be killed (SIGKILL) the moment the new session appears.

``python sealed_fork_child.py PATH``: the store under ``prefix_for(PATH)``, keys
``KEYS``; prints ``ready``, waits for a line on stdin, then forks "src" into "dst" with
its state and prints ``forked``, and waits for stdin to close.
"""

from __future__ import annotations

import sys
from pathlib import Path

from services_redis import prefix_for, redis_url

from lousho_sessions.redis import RedisStore
from lousho_sessions.stores.base import ForkRequest

KEYS = {"k1": bytes(range(32))}


def open_sealed(path: Path) -> RedisStore:
    return RedisStore(redis_url(), prefix=prefix_for(path), lease_ttl=2.0, encryption=KEYS)


def main() -> None:
    store = open_sealed(Path(sys.argv[1]))
    print("ready", flush=True)
    sys.stdin.readline()
    store.sessions.fork(ForkRequest("src", "dst", None, True, store.checkpoints))
    print("forked", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
