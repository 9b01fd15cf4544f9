"""The connection side of a ``RedisStore``: keys, scripts, errors, scanning.

What the store (``lousho_sessions.stores.redis``) and its checkpoint and approval
parts (``_redis_records``) share, in a module of its own so neither imports the other.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import redis

from ..errors import LeaseLostError, StoreClosedError, StoreCorruptError, StoreError
from . import _redis_scripts as lua
from ._sealing import Sealing

__all__ = [
    "EVICTION_MODES",
    "MAX_VALUE_BYTES",
    "NO_SESSION",
    "RedisConnection",
    "eviction_mode",
    "text",
]

log = logging.getLogger("lousho_sessions.stores.redis")

#: What ``RedisStore(eviction=...)`` does on a server whose ``maxmemory-policy`` may
#: evict keys: refuse to work (the default) or log a warning on first use and go on.
EVICTION_MODES = ("refuse", "warn")
#: The largest value Redis takes in one argument unless its ``proto-max-bulk-len`` says
#: otherwise (read from the server on first use).
MAX_VALUE_BYTES = 512 * 1024 * 1024

#: The hash tag of approvals whose ``session_id`` is not a session id (``None``, say).
NO_SESSION = "~"
_FORBIDDEN_IN_PREFIX = set("{}*?[]\\ ")


def text(value: object, *, source: str) -> str:
    """A reply as ``str`` (clients may or may not decode); ``StoreCorruptError`` if not UTF-8."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StoreCorruptError(f"{source}: not UTF-8 text: {exc}") from exc
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    raise StoreCorruptError(f"{source}: unexpected reply {type(value).__name__}")


def _seconds(value: timedelta | float | None, what: str) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not 0 < seconds < float("inf"):
        raise ValueError(f"{what} must be a positive number of seconds, got {value!r}")
    return seconds


def eviction_mode(value: str) -> str:
    """``value`` if it is one of ``EVICTION_MODES``, else ``ValueError``."""
    if value not in EVICTION_MODES:
        raise ValueError(f"eviction must be 'refuse' or 'warn', got {value!r}")
    return value


def _config_value(reply: object) -> str | None:
    """The value of a one-parameter ``CONFIG GET`` reply (a dict; on Cluster, one per node)."""
    while isinstance(reply, dict):
        if not reply:
            return None
        reply = next(iter(reply.values()))
    return None if reply is None else text(reply, source="CONFIG GET")


class RedisConnection:
    """A Redis client, a key prefix and the store's scripts; Redis errors become ``StoreError``."""

    #: how records are written and read: clear unless the store was given ``encryption=``
    sealing: Sealing = Sealing()

    def __init__(
        self,
        client: str | redis.Redis,
        *,
        prefix: str = "lousho",
        lease_ttl: float = 20.0,
        ttl: timedelta | float | None = None,
        wake_poll: float = 2.0,
        eviction: str = "refuse",
    ) -> None:
        self.eviction = eviction_mode(eviction)
        #: set once the server's policy and limits were read (``check_server``)
        self._server_checked = False
        self.max_value_bytes = MAX_VALUE_BYTES
        if not isinstance(prefix, str) or not prefix or _FORBIDDEN_IN_PREFIX & set(prefix):
            raise ValueError(
                f"prefix must be a non-empty string without braces, glob characters or "
                f"spaces, got {prefix!r}"
            )
        self.prefix = prefix
        self.lease_ttl = _seconds(lease_ttl, "lease_ttl") or 0.0
        self.ttl = _seconds(ttl, "ttl")
        self.wake_poll = _seconds(wake_poll, "wake_poll") or 0.0
        self._ttl_arg = "" if self.ttl is None else str(max(1, round(self.ttl * 1000)))
        if isinstance(client, str):
            self.client: Any = redis.Redis.from_url(client)
            self._owns_client = True
        else:
            self.client = client
            self._owns_client = False
        kwargs = getattr(self.client, "connection_pool", None)
        kwargs = getattr(kwargs, "connection_kwargs", {}) or {}
        self.where = (
            f"redis://{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)} "
            f"prefix {prefix!r}"
        )
        timeout = kwargs.get("socket_timeout")
        if isinstance(timeout, (int, float)) and 0 < timeout <= self.wake_poll:
            # a BLPOP of wake_poll seconds would outlast the socket: every waiting turn
            # would fail with a timeout. Wait in shorter BLPOPs instead.
            log.info(
                "%s: wake_poll lowered from %.3g s to %.3g s, under the client's "
                "socket_timeout of %.3g s",
                self.where,
                self.wake_poll,
                timeout / 2,
                timeout,
            )
            self.wake_poll = timeout / 2
        self._closed = False
        self._lock = threading.Lock()
        self._scripts = {
            name: self.client.register_script(getattr(lua, name))
            for name in lua.__all__
            if name != "SESSION_PARTS"
        }
        self._scripts.update(
            (name, self.client.register_script(body)) for name, body in _history_scripts()
        )

    @property
    def closed(self) -> bool:
        return self._closed

    # -- keys ---------------------------------------------------------------------

    def session_keys(self, id: str) -> list[str]:
        """Every key session ``id`` can have, in ``SESSION_PARTS`` order; one hash tag, one slot."""
        return [f"{self.prefix}:{{{id}}}:{part}" for part in lua.SESSION_PARTS]

    def key(self, id: str, part: str) -> str:
        return f"{self.prefix}:{{{id}}}:{part}"

    @property
    def approval_index(self) -> str:
        """The hash ``approval id -> session id`` (a key of its own slot, written separately)."""
        return f"{self.prefix}:approval-index"

    # -- calls --------------------------------------------------------------------

    @contextmanager
    def call(self, what: str) -> Iterator[Any]:
        """The client, with Redis errors raised as ``StoreError`` naming the server and ``what``."""
        self._ready()
        try:
            yield self.client
        except redis.RedisError as exc:
            raise self._error(exc, what) from exc

    def _ready(self) -> None:
        """Refuse a call on a closed store; check the server on first use."""
        if self._closed:
            raise StoreClosedError(f"{self.where}: the Redis store was closed")
        if not self._server_checked:
            self.check_server()

    def _error(self, exc: redis.RedisError, what: str) -> StoreError:
        return StoreError(f"{self.where}: {what}: {type(exc).__name__}: {exc}")

    def check_server(self, *, refuse: bool | None = None) -> str | None:
        """Read the server's ``maxmemory-policy`` and ``proto-max-bulk-len`` (once, on first
        use); the policy, or ``None`` where ``CONFIG`` is not allowed (managed servers).

        A policy other than ``noeviction`` lets the server delete keys when memory runs
        short: transcripts vanish, a session keeps its length but loses messages, a lease
        disappears under its turn. ``StoreError`` then unless ``eviction="warn"`` (or
        ``refuse=False``), which logs a warning once instead. A server that cannot be
        reached is checked at the next call.
        """
        try:
            policy = _config_value(self.client.config_get("maxmemory-policy"))
            bulk = _config_value(self.client.config_get("proto-max-bulk-len"))
        except (redis.ConnectionError, redis.TimeoutError):
            return None  # the call itself says so; checked at the next one
        except Exception as exc:  # CONFIG refused (managed servers, ACLs), or a Cluster reply
            log.debug("%s: cannot read the server's config: %s", self.where, exc)
            self._server_checked = True
            return None
        if bulk is not None and bulk.isdigit():
            self.max_value_bytes = int(bulk)
        if policy is not None and policy != "noeviction":
            message = (
                f"{self.where}: the server's maxmemory-policy is {policy!r}: under memory "
                "pressure it deletes keys, and sessions, checkpoints and leases with them "
                "(sessions lost or half-gone, two turns at once). Set it to noeviction "
                "(CONFIG SET maxmemory-policy noeviction, and in redis.conf), or use a "
                "Redis of its own for sessions"
            )
            if refuse if refuse is not None else self.eviction == "refuse":
                raise StoreError(message + "; eviction='warn' opens it all the same")
            if not self._server_checked:
                log.warning("%s", message)
        self._server_checked = True
        return policy

    def check_size(self, args: tuple[object, ...], what: str) -> None:
        """``StoreError`` naming the limit if an argument is larger than the server takes in
        one value (``proto-max-bulk-len``, 512 MB by default), before anything is sent."""
        limit = self.max_value_bytes
        quarter = limit >> 2  # UTF-8: at most 4 bytes a character; one test per argument
        for arg in args:
            if isinstance(arg, (str, bytes)) and len(arg) > quarter:
                self._check_value(arg, limit, what)

    def _check_value(self, arg: str | bytes, limit: int, what: str) -> None:
        """``check_size`` of a value that may be over ``limit`` bytes."""
        size = len(arg.encode("utf-8", "surrogatepass") if isinstance(arg, str) else arg)
        if size > limit:
            raise StoreError(
                f"{self.where}: {what}: a value of {size:,} bytes is over the largest "
                f"Redis takes in one value ({limit:,} bytes: proto-max-bulk-len, 512 MB "
                "by default); nothing was written. Keep large content (files, images) "
                "out of the transcript"
            )

    def run(self, name: str, id: str, *args: object, what: str) -> Any:
        """Run script ``name`` on session ``id``'s keys with ``args``."""
        return self.run_on(name, self.session_keys(id), *args, what=what)

    def run_on(self, name: str, keys: list[str], *args: object, what: str) -> Any:
        """Run script ``name`` on ``keys`` (all in one slot) with ``args``."""
        self._ready()  # ``call()``'s checks, without a generator: two scripts a turn
        self.check_size(args, what)
        try:
            return self._scripts[name](keys=keys, args=list(args))
        except redis.RedisError as exc:
            raise self._error(exc, what) from exc

    def ttl_arg(self, id: str) -> str:
        """The session TTL argument of the scripts: none for the group of session-less approvals."""
        return "" if id == NO_SESSION else self._ttl_arg

    def lease_lost(self, id: str, fence: object, latest: object) -> LeaseLostError:
        return LeaseLostError(
            f"session {id!r} ({self.where}): the write carries fence {fence} but fence "
            f"{text(latest, source='fence')} was handed out since; this turn lost its lease, "
            "so nothing was written"
        )

    def server_time_us(self) -> int:
        """The server's clock in microseconds (what the scripts compare with)."""
        with self.call("TIME") as client:
            seconds, micros = client.time()
        return int(seconds) * 1_000_000 + int(micros)

    def scan(self, match: str) -> Iterator[str]:
        """Keys matching ``match`` (``SCAN``, never ``KEYS``); a key may come twice."""
        with self.call(f"SCAN {match}") as client:
            for key in client.scan_iter(match=match, count=500):
                yield text(key, source="SCAN")

    def session_of(self, key: str) -> str:
        """The session id inside ``key``'s hash tag."""
        return key[key.index("{") + 1 : key.index("}")]


def _history_scripts() -> list[tuple[str, str]]:
    """The scripts of ``rewind`` and ``fork`` (``_redis_history``), registered with the rest."""
    from ._redis_history_scripts import FORK, FORK_READ, FORK_SEALED, REWIND

    return [
        ("REWIND", REWIND),
        ("FORK", FORK),
        ("FORK_READ", FORK_READ),
        ("FORK_SEALED", FORK_SEALED),
    ]
