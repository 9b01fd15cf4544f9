"""The lease of a ``RedisStore`` turn (``lousho_sessions.stores.redis``): renewed, fenced.

Taken by ``RedisStore.turn_lock`` (the ``ACQUIRE`` or ``ACQUIRE_SAVING`` script),
renewed by the store's heartbeat (``RENEW``), freed by ``RELEASE`` or by the
commit script that appends the turn (``commit_turn(CommitTurn(release=))``).
"""

from __future__ import annotations

import logging
import threading
import time

from ..errors import StoreError
from ._heartbeat import Heartbeat, RenewedLease
from ._redis_base import RedisConnection

__all__ = ["RedisLease"]

log = logging.getLogger("lousho_sessions.stores.redis")


class RedisLease(RenewedLease):
    """A lease renewed by the store's heartbeat; ``lost`` once renewal fails or time runs out.

    The store's ``Heartbeat`` renews it every ``lease_ttl / 3`` seconds. The lease
    is lost when a renewal finds another holder or fence, or when ``lease_ttl``
    seconds passed since the last renewal that succeeded was sent (a stopped
    process, a lost network): by then the server may have handed the session to
    another turn, whose newer fence makes the server refuse this turn's writes.
    ``release()`` stops the renewals (waiting for one in progress), then frees the
    session and wakes one waiter.
    """

    def __init__(
        self, store: RedisConnection, heartbeat: Heartbeat, session_id: str, fence: int, token: str
    ) -> None:
        self._store = store
        self._token = token
        self._ttl_ms = str(max(1, round(store.lease_ttl * 1000)))
        self._renewed = time.monotonic()
        self._taken = threading.Event()
        super().__init__(
            session_id,
            fence,
            self._finish,
            heartbeat=heartbeat,
            interval=store.lease_ttl / 3,
        )

    @property
    def lost(self) -> bool:
        """True once released, taken over, or not renewed for ``lease_ttl`` seconds."""
        if super().lost or self._taken.is_set():
            return True
        if time.monotonic() - self._renewed >= self._store.lease_ttl:
            self._taken.set()  # stays lost: another turn may have taken the session meanwhile
            return True
        return False

    def _beat(self) -> bool:
        """One renewal; whether to go on renewing."""
        sent = time.monotonic()
        try:
            held = self._store.run(
                "RENEW",
                self.session_id,
                self._token,
                str(self.fence),
                self._ttl_ms,
                what="renew",
            )
        except StoreError as exc:
            if self.lost:
                log.error("session %r: lease lost, not renewed in time: %s", self.session_id, exc)
                return False
            log.warning("session %r: lease renewal failed, retrying: %s", self.session_id, exc)
            return True
        if int(held) != 1:
            log.warning(
                "session %r: the lease with fence %d was taken over (it expired); this "
                "turn's writes will be refused",
                self.session_id,
                self.fence,
            )
            self._taken.set()
            return False
        self._renewed = sent
        return True

    def _finish(self) -> None:
        self.stop_renewals()
        if self._store.closed:
            return
        self._store.run(
            "RELEASE",
            self.session_id,
            self._token,
            str(self.fence),
            self._store.ttl_arg(self.session_id),
            what="release",
        )
