"""A process sending turns to one session in a loop while another process rewinds it.

``python rewind_race_child.py KIND PATH COUNT``: opens the store of ``KIND`` under
``PATH`` and sends "0", "1", ... "COUNT-1" to session "s1" with an echo model (the reply to
user message "i" is "i:"), printing ``ok i <reply>`` or ``err i <error>`` per turn, then
``done``. The model checks what it is shown: the stored transcript (read under the turn's
lease) and this turn's input, so a turn working from a transcript a rewind changed fails.
"""

from __future__ import annotations

import sys
from pathlib import Path

from history_stores import open_store

from lousho_sessions import FunctionProvider, ModelRequest, create_agent
from lousho_sessions.stores.adapters import store_parts


def main() -> None:
    kind, path, count = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    store = open_store(kind, path)
    sessions = store_parts(store).sessions
    assert sessions is not None

    def echo(request: ModelRequest) -> str:
        shown = [m.id for m in request.messages]
        stored = [m.id for m in sessions.load("s1") or []]
        # the input may be stored already (saved with the lease) or not yet
        if shown[: len(stored)] != stored or len(stored) < len(shown) - 1:
            raise AssertionError(f"the model was shown {shown}, the store holds {stored}")
        return f"{request.messages[-1].text}:"

    agent = create_agent(provider=FunctionProvider(echo), store=store)
    session = agent.session("s1")
    print("ready", flush=True)
    for i in range(count):
        try:
            result = session.send(str(i))
        except Exception as exc:  # reported: the test fails on any
            print(f"err {i} {type(exc).__name__}: {exc}".replace("\n", " "), flush=True)
        else:
            print(f"ok {i} {result.text}", flush=True)
    agent.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
