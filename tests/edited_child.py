"""The process of tests/test_approval_arguments.py that approves with edited arguments and dies.

``python edited_child.py URL LOG APPROVAL_ID ARGUMENTS_JSON`` approves ``APPROVAL_ID``
with ``agent.approvals.resolve(..., arguments=ARGUMENTS)`` and continues the paused turn,
whose ``pay`` tool (``approved_child.make_agent``) creates ``LOG.hanging`` and waits
there until the test SIGKILLs the process. ``cli_agent`` is the ``--agent`` the CLI
tests give ``lousho approvals resolve``: the same agent, logging to ``$EDITED_LOG``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from approved_child import make_agent

from lousho_sessions.agent import Agent


def cli_agent(store: Any) -> Agent:
    return make_agent(store, os.environ["EDITED_LOG"])


if __name__ == "__main__":
    from lousho_sessions import open_store

    url, log, approval_id, arguments = sys.argv[1:5]
    agent = make_agent(open_store(url), log, hang=True)
    agent.approvals.resolve(approval_id, approved=True, arguments=json.loads(arguments))
    raise SystemExit("the turn was not killed")
