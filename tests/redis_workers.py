"""Bodies of the processes tests/test_redis.py starts (fork_server.CONTEXT): holders that get stopped."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from typing import Any

import storekit
from services_redis import redis_url
from storekit import WAIT

from lousho_sessions import FunctionProvider, LeaseLostError, Message, create_agent
from lousho_sessions.providers.base import ModelRequest
from lousho_sessions.redis import RedisStore


def stale_writer(prefix: str, lease_ttl: float, out: Queue[Any], go: Event) -> None:
    """Take session "s"'s lease, report its fence, wait for ``go`` (the test stops this
    process meanwhile), then try to write with that fence and report what happened."""
    try:
        with RedisStore(redis_url(), prefix=prefix, lease_ttl=lease_ttl) as store:
            lease = store.sessions.turn_lock("s", timeout=WAIT)
            out.put(("held", lease.fence))
            assert go.wait(WAIT)
            lost = lease.lost
            outcomes = []
            writes: list[Callable[[], None]] = [
                lambda: store.sessions.append("s", [Message.user("stale")], 0, fence=lease.fence),
                lambda: store.checkpoints.save("s.turn-9", {"stale": True}, fence=lease.fence),
                lambda: store.approvals.create(
                    {"id": "stale", "session_id": "s", "status": "pending"}, fence=lease.fence
                ),
            ]
            for write in writes:
                try:
                    write()
                    outcomes.append("written")
                except LeaseLostError:
                    outcomes.append("refused")
            lease.release()
            out.put(("done", (lost, outcomes)))
    except BaseException:
        out.put(("error", traceback.format_exc()))


def stalled_send(prefix: str, lease_ttl: float, out: Queue[Any], go: Event) -> None:
    """``session.send`` whose model reports, then waits for ``go`` (the test stops this
    process meanwhile); reports how the send ended."""

    def model(request: ModelRequest) -> str:
        out.put(("in-model", len(request.messages)))
        assert go.wait(WAIT)
        return "stale answer"

    try:
        with RedisStore(redis_url(), prefix=prefix, lease_ttl=lease_ttl) as store:
            agent = create_agent(provider=FunctionProvider(model), store=store)
            try:
                agent.session("s").send("first", timeout=WAIT * 2)
                out.put(("done", "written"))
            except Exception as exc:
                out.put(("done", type(exc).__name__))
            finally:
                agent.close()
    except BaseException:
        out.put(("error", traceback.format_exc()))


def second_turn_until_killed(prefix: str, lease_ttl: float, out: Queue[Any]) -> None:
    """``storekit.second_turn_until_killed`` on a ``RedisStore``."""
    storekit.second_turn_until_killed(
        lambda: RedisStore(redis_url(), prefix=prefix, lease_ttl=lease_ttl), out, WAIT
    )
