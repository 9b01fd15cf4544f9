"""``open_store(url)``: a store named by a URL, for ``create_agent(store=url)``,
``LOUSHO_STORE`` and the ``lousho`` admin command.

* ``memory:``: ``memory_store()`` (this process only);
* ``file:///abs/dir``, ``file:rel/dir``: ``file_store(dir)``;
* ``sqlite:///rel.db``, ``sqlite:////abs.db``, ``sqlite:///:memory:``: ``SqliteStore(path)``;
* ``postgresql://…``, ``postgres://…``: ``PostgresStore(conninfo)``;
* ``redis://…``, ``rediss://…``: ``RedisStore(url)``.

``sqlite:`` URLs read as SQLAlchemy reads them: three slashes and a relative path,
four for an absolute one. Query options set the store's keyword arguments
(``?synchronous=FULL``, ``?schema=app&lease_ttl=10``, ``?prefix=app``); the others
go to the driver. The driver modules are imported here, on use, never by
``import lousho_sessions``. Errors name the URL with its password replaced by ``***``.

Every scheme takes ``?encryption_key_env=NAME``: the store's ``encryption=`` read from
environment variable ``NAME`` (``keyid:base64key[,keyid:base64key...]``, the last one
current). A key itself is never read from a URL: URLs end up in logs and process lists,
so ``?encryption_key=...`` and the like are refused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import attrs

from ..encryption import Encryption, EncryptionKeyError
from ..errors import LoushoError, StoreError
from ._rotation import BATCH, RotationResult
from .base import AgentStore, PruneResult
from .files import file_store
from .memory import memory_store

__all__ = ["StoreURLError", "URLStore", "open_store", "redacted_url"]

#: The environment variable ``create_agent()`` reads when it is given no store.
STORE_ENV = "LOUSHO_STORE"

_SCHEMES = ("memory", "file", "sqlite", "postgresql", "postgres", "redis", "rediss")


class StoreURLError(LoushoError, ValueError):
    """A store URL that cannot be opened as written: unknown scheme, bad option, missing extra."""

    code = "LOUSHO_STORE_URL"


@attrs.define
class URLStore(AgentStore):
    """The ``AgentStore`` ``open_store`` returns: the parts of ``backend``, with its
    ``prune`` and ``close``.

    ``kind`` is ``"memory"``, ``"file"``, ``"sqlite"``, ``"postgresql"`` or ``"redis"``;
    ``url`` is the URL with any password replaced by ``***``; ``backend`` the store
    opened (``MemoryStore``, ``FileStore``, ``SqliteStore``, ``PostgresStore``,
    ``RedisStore``).
    """

    kind: str = ""
    url: str = ""
    backend: Any = None
    _close: Callable[[], None] | None = None

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """The backend's ``prune``: sessions, checkpoints and resolved approvals older than that."""
        result: PruneResult = self.backend.prune(older_than)
        return result

    def rotate_key(self, *, batch_size: int = BATCH) -> RotationResult:
        """The backend's ``rotate_key``: every record rewritten with the current key."""
        result: RotationResult = self.backend.rotate_key(batch_size=batch_size)
        return result

    def close(self) -> None:
        """Close the backend (connections, pools); closing twice is fine."""
        if self._close is not None:
            self._close()

    def __enter__(self) -> URLStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"URLStore({self.url!r})"


def redacted_url(url: str) -> str:
    """``url`` with the password of its netloc (and a ``password=`` option) replaced by ``***``."""
    url = re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/?#@:]*):[^/?#@]*@", r"\1:***@", url)
    return re.sub(r"(?i)([?&]password=)[^&#]*", r"\1***", url)


def open_store(url: str) -> URLStore:
    """Open the store ``url`` names (see the module docstring); ``StoreURLError`` if it cannot.

    Errors of the store itself (a server that does not answer, a corrupt file) are
    raised as the store raises them (``StoreError``), naming the URL without its password.
    """
    if not isinstance(url, str) or not url.strip():
        raise StoreURLError(f"a store URL must be a non-empty string, got {url!r}")
    url = url.strip()
    shown = redacted_url(url)
    scheme, sep, _ = url.partition(":")
    scheme = scheme.lower()
    if not sep or scheme not in _SCHEMES:
        raise StoreURLError(
            f"unknown store URL {shown!r}: expected memory:, file:///dir, sqlite:///path.db, "
            "postgresql://..., or redis://..."
        )
    parts = urlsplit(url)
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    encryption = _encryption(shown, options)
    if scheme == "memory":
        _no_options(shown, options)
        if parts.path or parts.netloc:
            raise StoreURLError(f"{shown!r}: a memory store takes no path; write 'memory:'")
        memory = memory_store(encryption=encryption)
        return URLStore(*_parts(memory), kind="memory", url=shown, backend=memory)
    if scheme == "file":
        _no_options(shown, options)
        return _file(url, shown, parts.netloc, parts.path, encryption)
    try:
        if scheme == "sqlite":
            return _sqlite(shown, parts.netloc, parts.path, options, encryption)
        if scheme in ("postgresql", "postgres"):
            return _postgres(shown, parts, options, encryption)
        return _redis(shown, parts, options, encryption)
    except StoreError as exc:
        if shown in str(exc):
            raise
        raise type(exc)(f"cannot open {shown!r}: {exc}") from exc


def _parts(store: Any) -> tuple[Any, Any, Any]:
    return store.sessions, store.checkpoints, store.approvals


def _opened(shown: str, kind: str, make: Callable[[], Any]) -> URLStore:
    """``make()`` the store as a ``URLStore`` it closes; its ``ValueError`` for a bad option
    becomes ``StoreURLError`` naming the URL (passwords masked), a ``LoushoError`` passes."""
    try:
        store = make()
    except ValueError as exc:
        if isinstance(exc, LoushoError):
            raise
        raise StoreURLError(f"{shown!r}: {redacted_url(str(exc))}") from exc
    return URLStore(*_parts(store), kind=kind, url=shown, backend=store, close=store.close)


#: the option naming the environment variable that holds a store's encryption keys
ENCRYPTION_KEY_ENV = "encryption_key_env"
#: options that look like a key written into the URL (libpq's ``sslkey`` is a file path: kept)
_KEY_NAMES = frozenset({"key", "keys", "secret", "secret_key", "aes_key"})


def _encryption(shown: str, options: dict[str, str]) -> Encryption | None:
    """The ``encryption=`` of ``?encryption_key_env=NAME``, taken out of ``options``; a key
    written in the URL itself is refused (without repeating it)."""
    for name in list(options):
        lowered = name.lower()
        if lowered != ENCRYPTION_KEY_ENV and ("encrypt" in lowered or lowered in _KEY_NAMES):
            raise StoreURLError(
                f"{redacted_url(shown.split('?')[0])!r}: option {name!r}: encryption keys are "
                f"never read from a store URL; put them in an environment variable and write "
                f"?{ENCRYPTION_KEY_ENV}=NAME"
            )
    if ENCRYPTION_KEY_ENV not in options:
        return None
    variable = options.pop(ENCRYPTION_KEY_ENV)
    if not variable:
        raise StoreURLError(f"{shown!r}: {ENCRYPTION_KEY_ENV}= names no environment variable")
    try:
        return Encryption.from_env(variable)
    except EncryptionKeyError as exc:
        raise StoreURLError(f"{shown!r}: {exc}") from None


def _no_options(shown: str, options: Mapping[str, str]) -> None:
    if options:
        raise StoreURLError(f"{shown!r}: this store takes no options, got {sorted(options)}")


def _file(url: str, shown: str, netloc: str, path: str, encryption: Encryption | None) -> URLStore:
    if netloc not in ("", "localhost"):
        raise StoreURLError(
            f"{shown!r}: a file store is on this machine: no host, write file:///dir"
        )
    if not path:
        raise StoreURLError(f"{shown!r}: no directory; write file:///absolute/dir or file:dir")
    directory = unquote(path)
    store = file_store(directory, encryption=encryption)
    return URLStore(*_parts(store), kind="file", url=shown, backend=store)


def _sqlite(
    shown: str, netloc: str, path: str, options: dict[str, str], encryption: Encryption | None
) -> URLStore:
    if netloc:
        raise StoreURLError(
            f"{shown!r}: an SQLite URL has no host; write sqlite:///relative.db or "
            "sqlite:////absolute/path.db"
        )
    raw = unquote(path)
    if not raw.startswith("/") or raw == "/":
        raise StoreURLError(f"{shown!r}: no database path; write sqlite:///relative.db")
    target = raw[1:]  # sqlite:///rel.db -> "rel.db"; sqlite:////abs.db -> "/abs.db"
    kwargs: dict[str, Any] = {"encryption": encryption}
    if "synchronous" in options:
        kwargs["synchronous"] = options.pop("synchronous")
    if "mode" in options:
        kwargs["mode"] = _number(shown, "mode", options.pop("mode"), int, base=8)
    _no_options(shown, options)
    from .sqlite import SqliteStore

    return _opened(shown, "sqlite", lambda: SqliteStore(target, **kwargs))


def _postgres(
    shown: str, parts: Any, options: dict[str, str], encryption: Encryption | None
) -> URLStore:
    kwargs: dict[str, Any] = {"encryption": encryption}
    numbers = (
        ("min_size", int),
        ("max_size", int),
        ("timeout", float),
        ("lease_ttl", float),
        ("statement_timeout", float),
    )
    for name, kind in numbers:
        if name in options:
            kwargs[name] = _number(shown, name, options.pop(name), kind)
    for name in ("notify", "migrate", "prepare"):
        if name in options:
            kwargs[name] = _flag(shown, name, options.pop(name))
    if "schema" in options:
        kwargs["schema"] = options.pop("schema")
    conninfo = urlunsplit(
        ("postgresql", parts.netloc, parts.path, urlencode(options), parts.fragment)
    )
    try:
        from .postgres import PostgresStore
    except ImportError as exc:
        raise StoreURLError(
            f"{shown!r} needs psycopg 3 and psycopg_pool: pip install 'lousho-sessions[postgres]'"
            f" ({exc})"
        ) from exc
    return _opened(shown, "postgresql", lambda: PostgresStore(conninfo, **kwargs))


def _redis(
    shown: str, parts: Any, options: dict[str, str], encryption: Encryption | None
) -> URLStore:
    kwargs: dict[str, Any] = {"encryption": encryption}
    if "prefix" in options:
        kwargs["prefix"] = options.pop("prefix")
    for name in ("lease_ttl", "ttl", "wake_poll"):
        if name in options:
            kwargs[name] = _number(shown, name, options.pop(name), float)
    client_url = urlunsplit(
        (parts.scheme.lower(), parts.netloc, parts.path, urlencode(options), parts.fragment)
    )
    try:
        from .redis import RedisStore
    except ImportError as exc:
        raise StoreURLError(
            f"{shown!r} needs the redis client: pip install 'lousho-sessions[redis]' ({exc})"
        ) from exc
    return _opened(shown, "redis", lambda: RedisStore(client_url, **kwargs))


def _number(shown: str, name: str, value: str, kind: type, *, base: int = 10) -> Any:
    try:
        return int(value, base) if kind is int else float(value)
    except ValueError:
        raise StoreURLError(
            f"{shown!r}: option {name}={value!r} is not a{'n integer' if kind is int else ' number'}"
        ) from None


def _flag(shown: str, name: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise StoreURLError(f"{shown!r}: option {name}={value!r} is not true or false")


def store_from_environment() -> URLStore | None:
    """The store ``LOUSHO_STORE`` names, opened; ``None`` when it is unset or empty."""
    url = os.environ.get(STORE_ENV, "").strip()
    if not url:
        return None
    try:
        return open_store(url)
    except StoreURLError as exc:
        raise StoreURLError(f"{STORE_ENV}: {exc}") from exc
