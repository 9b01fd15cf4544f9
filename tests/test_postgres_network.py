"""PostgreSQL connections closed while idle, and a hung database (issue 27 item 7).

A server (or PgBouncer, or a load balancer) that closes connections idle for a
while made the next statement on each pooled connection fail, and so users'
turns: connections are now checked on checkout. A hung server (here: a private
forwarder on 127.0.0.1 that stops forwarding, so the shared server is never
paused) made every statement wait forever: a lease was never marked lost, one
blocked renewal stopped every other renewal, and ``close()`` hung. Statements are
now bounded, leases lost by the clock, renewals independent, ``close()`` prompt.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from helpers import until
from services_pg import fresh_schema, postgres_url
from tcp_proxy import FreezableProxy

from lousho_sessions import FunctionProvider, StoreError, create_agent
from lousho_sessions.stores._heartbeat import Heartbeat
from lousho_sessions.stores.postgres import PostgresStore

WAIT = 10.0


@pytest.fixture
def schema() -> Iterator[str]:
    yield from fresh_schema()


def _with(url: str, **options: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"{url}{'&' if '?' in url else '?'}{query}"


def server_sessions(application_name: str) -> int:
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        ).fetchone()
    return int(row[0]) if row else 0


def test_turns_succeed_when_the_server_closed_the_pooled_connections_while_idle(
    schema: str,
) -> None:
    name = "lousho-idle-" + secrets.token_hex(4)
    # idle_session_timeout for this test's own sessions only (a connection option)
    url = _with(postgres_url(), options="-c%20idle_session_timeout%3D200", application_name=name)
    with PostgresStore(url, schema=schema, notify=False, min_size=2, max_size=4) as store:
        agent = create_agent(provider=FunctionProvider(lambda r: "fine"), store=store)
        session = agent.session("s")
        for n in range(5):
            until(lambda: server_sessions(name) == 0, "the server closed the idle connections")
            assert session.send(f"turn {n}").text == "fine"  # failed with StoreError before
        agent.close()
        assert store.sessions.load("s") is not None
        assert len(store.sessions.load("s") or []) == 10


@pytest.fixture
def proxy() -> Iterator[FreezableProxy]:
    parts = urlsplit(postgres_url())
    forwarder = FreezableProxy(parts.port or 5432, parts.hostname or "127.0.0.1")
    try:
        yield forwarder
    finally:
        forwarder.close()


def through(proxy: FreezableProxy) -> str:
    parts = urlsplit(postgres_url())
    netloc = f"{parts.username or 'postgres'}@127.0.0.1:{proxy.port}"
    return f"postgresql://{netloc}{parts.path}"


def closes_within(store: PostgresStore, seconds: float) -> bool:
    thread = threading.Thread(target=store.close, daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()


def test_a_hung_database_marks_the_lease_lost_and_close_finishes(
    schema: str, proxy: FreezableProxy
) -> None:
    store = PostgresStore(through(proxy), schema=schema, notify=True, lease_ttl=1.0)
    lease = store.turn_lock("s", timeout=WAIT)
    assert not lease.lost
    proxy.freeze()  # the next renewal (in 1/3 s) waits for a reply that does not come
    until(lambda: lease.lost, "the lease marked lost while the database hangs", timeout=WAIT)
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            store.sessions.load("s")
        except BaseException as exc:
            errors.append(exc)

    reader = threading.Thread(target=blocked, daemon=True)
    reader.start()
    assert closes_within(store, WAIT), "close() hung on the hung database"
    reader.join(WAIT)  # cut by close(), though its statement's bound is 60 s away
    assert not reader.is_alive()
    assert errors and isinstance(errors[0], StoreError)


def test_a_statement_on_a_hung_database_fails_after_statement_timeout(
    schema: str, proxy: FreezableProxy
) -> None:
    with PostgresStore(through(proxy), schema=schema, notify=False, statement_timeout=0.5) as store:
        store.sessions.load("s")
        proxy.freeze()
        began = time.monotonic()
        with pytest.raises(StoreError):
            store.sessions.load("s")
        assert time.monotonic() - began < WAIT


def test_a_renewal_on_a_connection_that_stopped_forwarding_is_cut_and_the_next_goes_through(
    schema: str, proxy: FreezableProxy
) -> None:
    store = PostgresStore(through(proxy), schema=schema, notify=False, lease_ttl=3.0)
    try:
        lease = store.turn_lock("s", timeout=WAIT)
        held: Any = lease
        first = held._last_ok
        proxy.freeze_existing()  # the pooled connections' flows are lost; new ones work
        until(lambda: held._last_ok > first, "a renewal on a new connection", timeout=WAIT)
        assert not lease.lost  # waited on the dead flow for the whole ttl before
        lease.release()
    finally:
        assert closes_within(store, WAIT)


def test_one_blocked_renewal_does_not_stop_the_others() -> None:
    heartbeat = Heartbeat("test-heartbeat")
    stuck = threading.Event()
    release = threading.Event()
    beats: list[float] = []

    def blocking() -> bool:
        stuck.set()
        release.wait(WAIT)
        return False

    def counting() -> bool:
        beats.append(time.monotonic())
        return True

    try:
        heartbeat.add(blocking, 0.01)
        assert stuck.wait(WAIT)
        heartbeat.add(counting, 0.01)
        until(lambda: len(beats) >= 3, "renewals of another lease while one is blocked")
    finally:
        release.set()
        heartbeat.close()


class _CountingCondition(threading.Condition):
    """A ``Condition`` that counts ``notify_all`` calls."""

    notified = 0

    def notify_all(self) -> None:
        self.notified += 1
        super().notify_all()


def test_statements_one_after_another_do_not_wake_the_watchdog_each_time() -> None:
    """Statements one after another, each registered with the watchdog: its thread sleeps
    until the nearest deadline it saw, so registering them wakes it about once a bound, not
    once each (which would be two thread switches a turn)."""
    from lousho_sessions.stores._postgres_watch import Watchdog

    dog = Watchdog("test-watchdog")
    dog._cond = counting = _CountingCondition(dog._lock)
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        for _ in range(200):
            ticket = dog.watch(conn, 30.0)
            conn.execute("SELECT 1")
            dog.done(ticket)
        assert counting.notified <= 2, counting.notified
        # a statement past its bound is still cut on time: the thread wakes at its deadline
        started = time.monotonic()
        ticket = dog.watch(conn, 0.3)
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT pg_sleep(10)")
        dog.done(ticket)
        assert time.monotonic() - started < 5
    dog.cut_all()
