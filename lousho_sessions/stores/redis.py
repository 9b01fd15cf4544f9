"""Redis stores: transcripts, checkpoints and approvals on a plain Redis 6+ server (no modules).

Import it as ``from lousho_sessions.redis import RedisStore`` (the ``redis``
extra): the root package never imports ``redis``. Every key of a session shares
one hash tag, ``<prefix>:{<id>}:<part>`` (parts in ``SESSION_PARTS``), so on Redis
Cluster each session lives in one slot and no command or script ever spans two.
Every mutation is one Lua script (``_redis_scripts``): it checks the fence and the
expected length, writes, bumps the revision and settles the TTL atomically.

The turn lock is a **lease** in the session's ``lease`` hash, taken, renewed and
released by script against the server's clock, renewed by a heartbeat thread the
``RedisLease`` owns, and fenced: writes carrying an older fence are refused with
``LeaseLostError``. Waiters block on the session's ``wake`` list (``BLPOP``),
pushed at each release, re-checking at least every ``wake_poll`` seconds and when
a dead holder's lease runs out.
"""

from __future__ import annotations

import logging
import secrets
import time
import weakref
from collections.abc import Sequence
from datetime import timedelta

import redis
import redis.cluster

from ..encryption import EncryptionOption
from ..errors import (
    SessionBusyError,
    StoreConflictError,
    StoreCorruptError,
    StoreError,
)
from ..messages import Message
from ..serde import messages_from_json
from ._commit_check import log_landed
from ._heartbeat import Heartbeat
from ._history_requests import Forked, ForkRequest, RewindRequest, Rewound
from ._redis_base import RedisConnection, eviction_mode, text
from ._redis_history import redis_fork, redis_info, redis_rewind
from ._redis_landed import redis_landed
from ._redis_lease import RedisLease
from ._redis_records import RedisApprovalStore, RedisCheckpointStore
from ._rotation import BATCH, RotationResult, rotate_redis
from ._sealing import Sealing
from ._state_requests import commit_text
from ._turn_requests import CommitTurn, ReadAhead, TakenTurn, TakeTurn, start_body
from ._waiting import call_signal, lease_wait_stopped, until_text, waiting_for_lease
from .base import (
    BaseSessionStore,
    LockScope,
    PruneResult,
    SessionInfo,
    older_than_seconds,
    validate_session_id,
    validate_turn_id,
)
from .lease import Lease, fence_session_id

__all__ = ["RedisLease", "RedisSessionStore", "RedisStore"]

log = logging.getLogger("lousho_sessions.stores.redis")

#: While a call with an abort signal waits for a lease: how long one ``BLPOP`` may block
#: (the signal cannot wake it), so a timeout or abort stops the wait within this.
_SIGNAL_POLL = 0.2


class RedisStore(RedisConnection):
    """Sessions, checkpoints and approvals on a Redis server: ``RedisStore(url | client)``.

    ``client`` is a URL (``redis://[:password@]host:6379/0``, ``rediss://`` for
    TLS) or a ``redis.Redis`` (or ``redis.cluster.RedisCluster``) you made; a
    client you pass is yours to close. Keys start with ``prefix`` (default
    ``"lousho"``; no braces, globs or spaces). ``lease_ttl`` (seconds) is how long
    a turn's lease lives without a heartbeat: a holder that dies blocks its session
    that long; a live holder renews it every third of it. ``ttl`` (seconds or a
    ``timedelta``, default none) lets a finished session expire that long after its
    last write; see docs/stores.md "Redis". A waiting ``turn_lock`` blocks in
    ``BLPOP`` for at most ``wake_poll`` seconds at a time (lowered under a client's
    ``socket_timeout``). ``eviction``: see ``RedisConnection.check_server``. After
    ``close()`` every call raises ``StoreClosedError``.
    """

    def __init__(
        self,
        client: str | redis.Redis,
        *,
        prefix: str = "lousho",
        lease_ttl: float = 20.0,
        ttl: timedelta | float | None = None,
        wake_poll: float = 2.0,
        encryption: EncryptionOption = None,
        eviction: str = "refuse",
    ) -> None:
        super().__init__(client, prefix=prefix, lease_ttl=lease_ttl, ttl=ttl, wake_poll=wake_poll)
        self.sealing = Sealing(encryption)
        self.eviction = eviction_mode(eviction)
        self._leases: weakref.WeakSet[RedisLease] = weakref.WeakSet()
        #: renews every lease this store holds (one thread, started on the first lease)
        self.heartbeat = Heartbeat(f"lousho-redis-heartbeat-{prefix}")
        self.sessions = RedisSessionStore(self)
        self.checkpoints = RedisCheckpointStore(self)
        self.approvals = RedisApprovalStore(self)

    def __repr__(self) -> str:
        return f"RedisStore({self.where}, {'closed' if self._closed else 'open'})"

    def __enter__(self) -> RedisStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the leases still held, stop their heartbeats, close a client made from a URL."""
        with self._lock:
            if self._closed:
                return
            leases = list(self._leases)
        for lease in leases:
            try:
                lease.release()
            except StoreError as exc:
                log.warning("%s: releasing %r on close failed: %s", self.where, lease, exc)
        with self._lock:
            self._closed = True
        self.heartbeat.close()
        if self._owns_client:
            self.client.close()

    # -- leases -------------------------------------------------------------------

    def turn_lock(self, id: str, *, timeout: float | None = None) -> RedisLease:
        """Hold session ``id`` for a turn; ``SessionBusyError`` if not acquired within ``timeout`` s."""
        return self._turn_lock(id, timeout, ())[0]

    def acquire(self, request: TakeTurn) -> tuple[RedisLease, str | None, bool, bool]:
        """The lease of ``request`` (a ``take_turn``), taken by one script that also reads the
        session's revision and whether it has a checkpoint, and saves the turn's first
        checkpoint (``ACQUIRE_SAVING``) when it goes to this store's checkpoints and nothing
        changed since it was built (offered again at each try while it waits): ``(lease,
        revision, no checkpoints, saved)``."""
        offer: tuple[str, ...] = ()
        revision = request.held_revision
        if (
            request.checkpoint is not None
            and isinstance(request.checkpoints, RedisCheckpointStore)
            and request.checkpoints.store is self
            and (revision is None or type(revision) is str)
        ):
            body = start_body(request, self.sealing)
            if body is not None:
                offer = (request.checkpoint.turn_id, revision or "", body)
        return self._turn_lock(request.id, request.timeout, offer)

    def _turn_lock(
        self, id: str, timeout: float | None, offer: tuple[str, ...]
    ) -> tuple[RedisLease, str | None, bool, bool]:
        validate_session_id(id)
        token = secrets.token_hex(12)
        ttl_ms = str(max(1, round(self.lease_ttl * 1000)))
        began = time.monotonic()
        deadline = None if timeout is None else began + max(timeout, 0.0)
        wake = self.key(id, "wake")
        script = "ACQUIRE_SAVING" if offer else "ACQUIRE"
        signal = call_signal()
        logged = False
        while True:
            acquired, value, *revision = self.run(
                script, id, token, ttl_ms, self._ttl_arg, *offer, what="lease"
            )
            if int(acquired) == 1:
                fence = int(text(value, source="fence"))
                lease = RedisLease(self, self.heartbeat, id, fence, token)
                stored = revision[0] if revision else None
                with self._lock:
                    self._leases.add(lease)
                return (
                    lease,
                    None if stored is None else text(stored, source="revision"),
                    len(revision) > 1 and int(revision[1]) == 0,  # no checkpoint of the session
                    len(revision) > 2 and int(revision[2]) == 1,  # the offered one saved
                )
            remaining = int(value) / 1e6
            wait = min(self.wake_poll, remaining + 0.005)
            now = time.monotonic()
            if signal is not None:
                if signal.aborted:
                    raise lease_wait_stopped(
                        id, None, remaining, now - began, signal.reason, self.where
                    )
                wait = min(wait, _SIGNAL_POLL)  # BLPOP cannot be woken by the signal
            if not logged and (deadline is None or deadline > now):
                logged = True
                log.info(
                    "session %r: waiting for the lease held by another turn until %s, "
                    "unless it is released or renewed first (%s)",
                    id,
                    until_text(remaining),
                    self.where,
                )
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SessionBusyError(
                        f"session {id!r} is held by another turn ({self.where}; "
                        f"not acquired within {timeout} s)"
                    )
                wait = min(wait, left)
            with self.call("waiting for a lease") as client:
                client.blpop([wake], timeout=max(wait, 0.01))

    def rotate_key(self, *, batch_size: int = BATCH) -> RotationResult:
        """Reseal every record not sealed with the current key, in batches (``rotate-key``)."""
        return rotate_redis(self, batch_size)

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete sessions and checkpoints not written within ``older_than`` (seconds or a
        ``timedelta``) and approvals resolved that long ago; pending approvals and sessions
        whose turn is running are kept. Walks the keys with ``SCAN``."""
        cutoff = self.server_time_us() - round(older_than_seconds(older_than) * 1e6)
        result = (
            self.sessions.prune_before(cutoff)
            + self.checkpoints.prune_before(cutoff)
            + self.approvals.prune_before(cutoff)
        )
        log.info("%s: pruned %s", self.where, result)
        return result


class RedisSessionStore(BaseSessionStore):
    """The transcripts of a ``RedisStore``: a list of message JSON per session.

    ``append`` is one script pushing only the new messages, ``revision`` one
    ``HGET``, and ``turn_lock`` a fenced lease excluding every process and machine
    using the server (``lock_scope`` ``"cluster"``).
    """

    lock_scope: LockScope = "cluster"
    fenced_writes = True
    saves_start_checkpoint = True
    commits_state = True
    forks_state = True
    prunes_state = True

    def __init__(self, store: RedisStore) -> None:
        self.store = store

    def __repr__(self) -> str:
        return f"RedisSessionStore({self.store.where})"

    def load(self, id: str) -> list[Message] | None:
        validate_session_id(id)
        source = f"{self.store.where}: session {id!r}"
        length, items = self.store.run("LOAD", id, what=f"load {id!r}")
        if length is None:
            if items:
                raise StoreCorruptError(f"{source}: messages are stored but no length")
            return None
        if text(length, source=source) != str(len(items)):
            raise StoreCorruptError(
                f"{source}: the length says {text(length, source=source)} messages, "
                f"{len(items)} are stored"
            )
        texts = self.store.sealing.open_texts(
            id, [text(item, source=source) for item in items], source=source
        )
        messages = messages_from_json(f"[{','.join(texts)}]", source=source)
        if len(messages) != len(items):
            raise StoreCorruptError(f"{source}: a stored message is not one JSON object")
        return messages

    def save(self, id: str, messages: Sequence[Message]) -> None:
        validate_session_id(id)
        rows = _rows(self.store.sealing, id, messages)
        self.store.run(
            "SAVE", id, secrets.token_hex(8), self.store.ttl_arg(id), *rows, what=f"save {id!r}"
        )

    def append(
        self,
        id: str,
        messages: Sequence[Message],
        expected_length: int,
        *,
        fence: int | None = None,
    ) -> None:
        """Add ``messages`` if ``expected_length`` are stored, else ``StoreConflictError``;
        ``LeaseLostError`` if ``fence`` is older than the session's newest."""
        self._append(id, messages, expected_length, fence, ())

    def commit_turn(self, request: CommitTurn) -> object | None:
        """Append the turn, store its state (``request.state``, the session's ``<id>.state``
        checkpoint field) and delete its checkpoints in one script when ``checkpoints`` is this
        store's and they are this session's, releasing ``release`` in that script too: a
        lease of this store on ``id`` with fence ``fence`` has its heartbeat stopped, is
        freed by the append script (waking a waiter) and marked released. A refused write
        releases nothing and the heartbeat goes on. Returns the new revision."""
        id, checkpoints, fence, lease = (
            request.id, request.checkpoints, request.fence, request.release,
        )  # fmt: skip
        keys = [validate_turn_id(key) for key in request.delete]
        if not (
            isinstance(checkpoints, RedisCheckpointStore)
            and checkpoints.store is self.store
            and all(fence_session_id(key) == id for key in keys)
        ):
            return super().commit_turn(request)
        messages, expected = request.messages, request.expected_length
        state = commit_text(self.store.sealing, validate_session_id(id), request.state) or ""
        if not (
            isinstance(lease, RedisLease)
            and lease._store is self.store
            and lease.session_id == id
            and fence is not None
            and lease.fence == fence
            and not lease.lost
        ):
            return self._append(id, messages, expected, fence, keys, state=state)
        token = lease._token
        return lease.freed_by(
            lambda: self._append(id, messages, expected, fence, keys, token, state=state)
        )

    def _append(
        self,
        id: str,
        messages: Sequence[Message],
        expected_length: int,
        fence: int | None,
        delete: Sequence[str],
        release: str = "",
        *,
        state: str = "",
    ) -> str:
        """The fenced, length-checked append script, deleting the checkpoints ``delete``,
        writing the state record ``state`` (a ``state_text``; ``""``: unchanged) and releasing
        the lease whose holder token is ``release`` (if it still holds it)."""
        validate_session_id(id)
        rows = _rows(self.store.sealing, id, messages)
        revision = secrets.token_hex(8)
        try:
            reply = self.store.run(
                "APPEND",
                id,
                str(int(expected_length)),
                "" if fence is None else str(int(fence)),
                revision,
                self.store.ttl_arg(id),
                release,
                state,
                str(len(delete)),
                *delete,
                *rows,
                what=f"append to {id!r}",
            )
        except StoreError as exc:
            if not isinstance(exc.__cause__, (redis.ConnectionError, redis.TimeoutError)):
                raise
            # the reply was lost: the script may have run
            if not redis_landed(self.store, id, messages, rows, expected_length, exc):
                raise
            log_landed(self.store.where, id, expected_length, exc)
            return revision
        outcome = text(reply[0], source="append")
        if outcome in ("lease-lost", "conflict") and redis_landed(
            self.store, id, messages, rows, expected_length, None
        ):
            # the client sent the script again after a lost reply (redis-py retries on a
            # dropped connection): the first run landed, the second found it there
            log_landed(self.store.where, id, expected_length, StoreError(f"reply {outcome!r}"))
            return revision
        if outcome == "lease-lost":
            raise self.store.lease_lost(id, fence, reply[1])
        if outcome == "conflict":
            raise StoreConflictError(
                f"session {id!r} ({self.store.where}): expected {expected_length} stored "
                f"messages, found {reply[1]}"
            )
        if outcome == "corrupt":
            raise StoreCorruptError(
                f"{self.store.where}: session {id!r}: the length and the {reply[1]} stored "
                "messages disagree; nothing was written"
            )
        return revision

    def delete(self, id: str) -> None:
        """Delete the transcript; the session's last fence is kept (fences keep growing)."""
        validate_session_id(id)
        self.store.run("SESSION_DELETE", id, self.store.ttl_arg(id), what=f"delete {id!r}")

    def revision(self, id: str) -> str | None:
        """A value that changes with every write of ``id``; ``None`` when nothing is stored."""
        validate_session_id(id)
        with self.store.call(f"revision of {id!r}") as client:
            value = client.hget(self.store.key(id, "meta"), "revision")
        return None if value is None else text(value, source=f"session {id!r}")

    def list_ids(self) -> list[str]:
        """The sessions with a ``meta`` hash under this store's prefix (``SCAN``, never ``KEYS``)."""
        keys = self.store.scan(f"{self.store.prefix}:{{*}}:meta")
        return sorted({self.store.session_of(key) for key in keys})

    def info(self, id: str) -> SessionInfo | None:
        """The length, last write and (for a fork) parent and fork point, from ``meta``."""
        return redis_info(self, id)

    def rewind(self, request: RewindRequest) -> Rewound:
        """Fenced, length-checked ``LTRIM``: one script (``_redis_history``)."""
        return redis_rewind(self, request)

    def fork(self, request: ForkRequest) -> Forked:
        """One script over both sessions' keys, writing the messages and (asked for, and kept
        in this store) the state; on Redis Cluster the contract's default."""
        if isinstance(self.store.client, redis.cluster.RedisCluster):
            return super().fork(request)
        return redis_fork(self, request)

    def turn_lock(self, id: str, *, timeout: float | None = None) -> Lease:
        """Hold session ``id`` for a turn; see ``RedisStore.turn_lock``."""
        return self.store.turn_lock(id, timeout=timeout)

    def take_turn(self, request: TakeTurn) -> TakenTurn:
        """The lease, taken by one script with the session's revision, whether it has a
        checkpoint and (when offered and nothing moved) the turn's first checkpoint (see
        ``RedisStore.acquire``); then only what was added since what the caller holds."""
        with waiting_for_lease(request.signal):
            lease, revision, empty, saved = self.store.acquire(request)
        here = request.checkpoints
        empty = empty and isinstance(here, RedisCheckpointStore) and here.store is self.store
        return ReadAhead(self, request).taken(
            lease, revision, no_checkpoints=empty, saved_checkpoint=saved
        )

    def take_over(self, id: str) -> int:
        """A new fence in the session's ``lease`` hash, expired at once (``TAKE_OVER``): the
        holder's renewals and writes are refused from now on."""
        validate_session_id(id)
        fence = self.store.run("TAKE_OVER", id, what=f"take over {id!r}")
        return int(text(fence, source="fence"))

    def turn_held(self, id: str) -> bool:
        """Whether a lease on ``id`` is unexpired now (its holder still heartbeats)."""
        validate_session_id(id)
        with self.store.call(f"lease of {id!r}") as client:
            holder, until = client.hmget(self.store.key(id, "lease"), ["holder", "until"])
        if not holder:
            return False
        return int(until or 0) > self.store.server_time_us()

    def held_sessions(self, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` whose lease is unexpired now, in one round trip."""
        wanted = [validate_session_id(i) for i in dict.fromkeys(ids)]
        if not wanted:
            return set()
        with self.store.call("leases") as client:
            pipe = client.pipeline(transaction=False)
            for id in wanted:
                pipe.hmget(self.store.key(id, "lease"), ["holder", "until"])
            answers = pipe.execute()
        now = self.store.server_time_us()
        return {
            id
            for id, (holder, until) in zip(wanted, answers, strict=True)
            if holder and int(until or 0) > now
        }

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete the sessions not written within ``older_than`` and their state, unless a
        turn holds them."""
        cutoff = self.store.server_time_us() - round(older_than_seconds(older_than) * 1e6)
        return self.prune_before(cutoff)

    def prune_before(self, cutoff_us: int) -> PruneResult:
        """Delete the sessions written before ``cutoff_us`` (unless held), then the leases
        of sessions that are gone (``LEASE_PRUNE``)."""
        deleted = leases = 0
        for key in set(self.store.scan(f"{self.store.prefix}:{{*}}:meta")):
            id = self.store.session_of(key)
            deleted += int(self.store.run("SESSION_PRUNE", id, str(cutoff_us), what="prune"))
        for key in set(self.store.scan(f"{self.store.prefix}:{{*}}:lease")):
            id = self.store.session_of(key)
            leases += int(self.store.run("LEASE_PRUNE", id, str(cutoff_us), what="prune"))
        return PruneResult(sessions=deleted, checkpoints=0, approvals=0, leases=leases)


def _rows(sealing: Sealing, id: str, messages: Sequence[Message]) -> list[str]:
    rows = []
    for m in messages:
        if not isinstance(m, Message):
            raise TypeError(f"session {id!r}: expected Message objects, got {type(m).__name__}")
        rows.append(sealing.message_text(id, m))
    return rows
