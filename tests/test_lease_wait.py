"""A call waiting for a dead holder's lease answers to its timeout and abort (issue 27 item 8).

A process takes a session's lease on PostgreSQL or Redis and dies (``os._exit``)
without releasing it: the lease stays until it runs out (30 s here, the default of
PostgreSQL). The next ``send()`` on the session waits for it. That wait must stop
when the call's ``timeout`` runs out or its signal is aborted, with an error that
says it waited for a previous holder's lease and until when, and it is logged at
INFO when it starts. Before, the wait ignored both and the error blamed "a tool
that ignores its signal".
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import fork_server
import pytest
from services_pg import drop_schema, postgres_url, require_postgres
from services_redis import drop_prefix, redis_url, require_redis

from lousho_sessions import AbortController, FunctionProvider, SessionBusyError, create_agent
from lousho_sessions import open_store as open_url

WAIT = 10.0
DEAD_HOLDER = """
import os, sys
from lousho_sessions import open_store
store = open_store(sys.argv[1])
store.sessions.turn_lock("s")
os._exit(0)
"""


@pytest.fixture(params=["postgres", "redis"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "postgres":
        require_postgres()
        schema = "t_wait_" + secrets.token_hex(6)
        try:
            yield f"{postgres_url()}?schema={schema}&lease_ttl=30"
        finally:
            drop_schema(schema)
    else:
        require_redis()
        prefix = "lousho-test-wait-" + secrets.token_hex(6)
        try:
            yield f"{redis_url()}?prefix={prefix}&lease_ttl=30"
        finally:
            drop_prefix(prefix)


def die_holding_the_lease(url: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = fork_server.run(["-c", DEAD_HOLDER, url], env=env, timeout=60, capture_output=True)
    assert done.returncode == 0, done.stderr


class Seen(logging.Handler):
    """Sets ``event`` once a record saying it waits for a lease is logged at INFO."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.event = threading.Event()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if record.levelno == logging.INFO and "waiting for the lease held by" in message:
            self.messages.append(message)
            self.event.set()


@pytest.fixture
def seen() -> Iterator[Seen]:
    handler = Seen()
    logger = logging.getLogger("lousho_sessions")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_send_timeout_stops_the_wait_for_a_dead_holders_lease(url: str, seen: Seen) -> None:
    die_holding_the_lease(url)
    with open_url(url) as store:
        agent = create_agent(provider=FunctionProvider(lambda r: "hi"), store=store)
        began = time.monotonic()
        with pytest.raises(SessionBusyError) as caught:
            agent.session("s").send("hello", timeout=0.5)
        took = time.monotonic() - began
        agent.close()
        assert store.sessions is not None and store.sessions.load("s") is None  # nothing saved
    message = str(caught.value)
    assert "the call's timeout ran out" in message
    assert "waiting for the lease held by" in message
    assert "runs out at" in message and "UTC" in message
    assert "ignores its signal" not in message
    assert took < WAIT  # not the 30 s the lease has left
    assert seen.messages and "until" in seen.messages[0]


def test_aborting_the_call_stops_the_wait_for_a_dead_holders_lease(url: str, seen: Seen) -> None:
    die_holding_the_lease(url)
    with open_url(url) as store:
        agent = create_agent(provider=FunctionProvider(lambda r: "hi"), store=store)
        controller = AbortController()
        outcome: list[Any] = []

        def send() -> None:
            try:
                outcome.append(agent.session("s").send("hello", signal=controller.signal))
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=send)
        thread.start()
        assert seen.event.wait(WAIT), "the wait for the lease was not logged at INFO"
        controller.abort("user left")
        thread.join(WAIT)  # the lease has 30 s left: only the abort ends the call this soon
        assert not thread.is_alive(), "the abort did not stop the wait for the lease"
        agent.close()
    [error] = outcome
    assert isinstance(error, SessionBusyError), error
    assert "the call was aborted ('user left')" in str(error)
    assert "waiting for the lease held by" in str(error)
