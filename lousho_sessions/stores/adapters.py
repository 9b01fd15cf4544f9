"""Adapters giving a user's plain store the whole contract, with the base classes' defaults.

A user may hand us any object with the Protocol's methods. ``store_parts`` wraps
it here, once: what the object offers of its own (``append``, ``revision``,
``turn_lock``, ``list_ids``, ``prune``, ``close``) is looked up at construction and used, the
rest comes from the base class. The user's methods cannot check fences, so the
adapters pass ``fence`` to nothing; ``fenced_writes`` says so.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar, cast

from ..errors import ApprovalDecisionError
from ..messages import Message
from .base import (
    AgentStore,
    ApprovalStore,
    BaseApprovalStore,
    BaseCheckpointStore,
    BaseSessionStore,
    CheckpointStore,
    LockScope,
    PruneResult,
    SessionStore,
    validate_session_id,
)
from .lease import Lease

__all__ = [
    "adapt_approvals",
    "adapt_checkpoints",
    "adapt_sessions",
    "approvals_contract",
    "checkpoints_contract",
    "parts_of",
    "sessions_contract",
    "store_parts",
    "takes_arguments",
]

_PARTS = ("sessions", "checkpoints", "approvals")

# One adapter per user object while it is in use, so that the session workers
# keyed by the store's identity, and the process-local turn locks, are shared.
_ADAPTERS: weakref.WeakValueDictionary[tuple[type, int], _Adapter] = weakref.WeakValueDictionary()
_ADAPTERS_LOCK = threading.Lock()


def _method(inner: object, name: str) -> Callable[..., Any] | None:
    found = getattr(inner, name, None)
    return found if callable(found) else None


class _Adapter:
    """What every adapter shares: the wrapped object, and its own ``prune`` and
    ``close`` used when it has them (else the base class's ``prune``; nothing to close)."""

    inner: object

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._prune = _method(inner, "prune")
        self._close = _method(inner, "close")

    def prune(self, older_than: timedelta | float) -> PruneResult:
        if self._prune is None:
            base_prune: Callable[[timedelta | float], PruneResult] = super().prune  # type: ignore[misc]
            return base_prune(older_than)
        result: PruneResult = self._prune(older_than)
        return result

    def close(self) -> None:
        if self._close is not None:
            self._close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"


class SessionStoreAdapter(_Adapter, BaseSessionStore):
    """A plain ``SessionStore`` under the contract.

    Its own ``append``, ``revision``, ``turn_lock`` (a context manager),
    ``list_ids``, ``prune`` and ``close`` are used when it has them. Its own ``append`` cannot
    check a fence, so with one ``fenced_writes`` is false; without one, the
    default ``append`` checks fences handed out in this process.
    ``lock_scope`` is the object's own if it declares one with its ``turn_lock``,
    else ``"process"``.
    """

    inner: SessionStore

    def __init__(self, inner: SessionStore) -> None:
        super().__init__(inner)
        self._append = _method(inner, "append")
        self._revision = _method(inner, "revision")
        self._turn_lock = _method(inner, "turn_lock")
        self._list_ids = _method(inner, "list_ids")
        scope = getattr(inner, "lock_scope", "process") if self._turn_lock else "process"
        self.lock_scope: LockScope = (
            "cluster" if scope == "cluster" else "machine" if scope == "machine" else "process"
        )
        self.fenced_writes = self._append is None

    def load(self, id: str) -> list[Message] | None:
        return self.inner.load(id)

    def save(self, id: str, messages: Sequence[Message]) -> None:
        self.inner.save(id, messages)

    def delete(self, id: str) -> None:
        self.inner.delete(id)

    def append(
        self,
        id: str,
        messages: Sequence[Message],
        expected_length: int,
        *,
        fence: int | None = None,
    ) -> None:
        if self._append is None:
            super().append(id, messages, expected_length, fence=fence)
        else:
            self._append(id, messages, expected_length)

    def revision(self, id: str) -> object | None:
        return super().revision(id) if self._revision is None else self._revision(id)

    def list_ids(self) -> list[str]:
        if self._list_ids is None:
            return super().list_ids()
        return sorted(self._list_ids())

    def turn_held(self, id: str) -> bool | None:
        # the object's own lock cannot be asked without taking it
        return super().turn_held(id) if self._turn_lock is None else None

    def turn_lock(self, id: str, *, timeout: float | None = None) -> Lease:
        if self._turn_lock is None:
            return super().turn_lock(id, timeout=timeout)
        validate_session_id(id)
        held = self._turn_lock(id, timeout=timeout)
        held.__enter__()
        leases = self._local_leases()
        try:
            fence = leases.issue(id)
        except BaseException:
            held.__exit__(None, None, None)
            raise
        return Lease(
            id,
            fence,
            lambda: held.__exit__(None, None, None),
            current=lambda: leases.current(id, fence),
        )


class CheckpointStoreAdapter(_Adapter, BaseCheckpointStore):
    """A plain ``CheckpointStore`` under the contract; ``fence`` is not checked."""

    inner: CheckpointStore

    def __init__(self, inner: CheckpointStore) -> None:
        super().__init__(inner)

    def load(self, turn_id: str) -> dict[str, Any] | None:
        return self.inner.load(turn_id)

    def save(
        self, turn_id: str, checkpoint: Mapping[str, Any], *, fence: int | None = None
    ) -> None:
        self.inner.save(turn_id, checkpoint)

    def delete(self, turn_id: str, *, fence: int | None = None) -> None:
        self.inner.delete(turn_id)

    def list(self, prefix: str = "") -> list[str]:
        return self.inner.list(prefix)


class ApprovalStoreAdapter(_Adapter, BaseApprovalStore):
    """A plain ``ApprovalStore`` under the contract; ``fence`` is not checked."""

    inner: ApprovalStore

    def __init__(self, inner: ApprovalStore) -> None:
        super().__init__(inner)

    def create(self, record: Mapping[str, Any], *, fence: int | None = None) -> None:
        self.inner.create(record)

    def get(self, id: str) -> dict[str, Any] | None:
        return self.inner.get(id)

    def resolve(
        self,
        id: str,
        *,
        approved: bool,
        reason: str | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        if arguments is None:
            return self.inner.resolve(id, approved=approved, reason=reason)
        if not takes_arguments(self.inner):
            raise ApprovalDecisionError(
                f"approval {id!r}: {type(self.inner).__name__}.resolve() takes no arguments=, "
                "so this store cannot keep a call's edited arguments"
            )
        resolve: Any = self.inner.resolve  # the Protocol's resolve has no arguments=
        return cast(
            "dict[str, Any]", resolve(id, approved=approved, reason=reason, arguments=arguments)
        )

    def list(
        self, session_id: str | None = None, status: str | None = "pending"
    ) -> list[dict[str, Any]]:
        return self.inner.list(session_id=session_id, status=status)

    def delete(self, id: str) -> None:
        self.inner.delete(id)


def takes_arguments(store: object) -> bool:
    """Whether the approval store's ``resolve`` takes ``arguments=`` (the built-in ones do;
    a user's store written before edited arguments existed may not)."""
    if isinstance(store, ApprovalStoreAdapter):
        store = store.inner
    try:
        parameters = inspect.signature(getattr(store, "resolve")).parameters  # noqa: B009
    except (AttributeError, TypeError, ValueError):
        return False
    return "arguments" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


_A = TypeVar("_A", bound=_Adapter)


def _cached(inner: object, kind: type[_A]) -> _A:
    with _ADAPTERS_LOCK:
        adapter = _ADAPTERS.get((kind, id(inner)))
        # The adapter holds ``inner``, so while it lives the id cannot be reused.
        if isinstance(adapter, kind) and adapter.inner is inner:
            return adapter
        made = kind(inner)
        _ADAPTERS[(kind, id(inner))] = made
        return made


def _subclass(store: object, base: type) -> bool:
    """``isinstance(store, base)``, answered from the MRO for a subclass (the common case),
    without the ABC machinery's check each turn."""
    return base in type(store).__mro__ or isinstance(store, base)


def adapt_sessions(store: object) -> BaseSessionStore:
    """``store`` if it subclasses ``BaseSessionStore``, else its (one) adapter."""
    if _subclass(store, BaseSessionStore):
        return cast(BaseSessionStore, store)
    return _cached(store, SessionStoreAdapter)


def adapt_checkpoints(store: object) -> BaseCheckpointStore:
    """``store`` if it subclasses ``BaseCheckpointStore``, else its (one) adapter."""
    if _subclass(store, BaseCheckpointStore):
        return cast(BaseCheckpointStore, store)
    return _cached(store, CheckpointStoreAdapter)


def adapt_approvals(store: object) -> BaseApprovalStore:
    """``store`` if it subclasses ``BaseApprovalStore``, else its (one) adapter."""
    if _subclass(store, BaseApprovalStore):
        return cast(BaseApprovalStore, store)
    return _cached(store, ApprovalStoreAdapter)


def parts_of(store: object) -> AgentStore:
    """``store_parts``: read ``store`` as its three parts, each adapted to the contract."""
    if store is None:
        return AgentStore()
    if isinstance(store, AgentStore):
        parts: tuple[Any, Any, Any] = (store.sessions, store.checkpoints, store.approvals)
    elif isinstance(store, Mapping):
        unknown = set(store) - set(_PARTS)
        if unknown:
            raise TypeError(
                f"unknown store parts {sorted(unknown)}; expected sessions, checkpoints, approvals"
            )
        parts = (store.get("sessions"), store.get("checkpoints"), store.get("approvals"))
    elif any(hasattr(store, name) for name in _PARTS):
        parts = (
            getattr(store, "sessions", None),
            getattr(store, "checkpoints", None),
            getattr(store, "approvals", None),
        )
    elif all(callable(getattr(store, name, None)) for name in ("load", "save", "delete")):
        parts = (store, None, None)
    else:
        raise TypeError(
            f"{type(store).__name__} is not a store: expected a SessionStore (load/save/delete) "
            "or an object with sessions/checkpoints/approvals"
        )
    sessions, checkpoints, approvals = parts
    adapted = AgentStore(
        None if sessions is None else adapt_sessions(sessions),
        None if checkpoints is None else adapt_checkpoints(checkpoints),
        None if approvals is None else adapt_approvals(approvals),
    )
    if isinstance(store, AgentStore) and all(
        getattr(store, n) is getattr(adapted, n) for n in _PARTS
    ):
        return store
    return adapted


def store_parts(store: object) -> AgentStore:
    """Read ``store`` as its parts, each adapted to the contract (see ``sessions_contract``).

    ``store`` is a ``SessionStore``, an ``AgentStore``, an object or mapping with
    ``sessions``/``checkpoints``/``approvals``, or ``None``. An ``AgentStore`` whose
    parts already follow the contract is returned as it is.
    """
    return parts_of(store)


def sessions_contract(store: SessionStore) -> BaseSessionStore:
    """``store`` itself if it subclasses ``BaseSessionStore``, else an adapter giving it the defaults."""
    return adapt_sessions(store)


def checkpoints_contract(store: CheckpointStore) -> BaseCheckpointStore:
    """``store`` itself if it subclasses ``BaseCheckpointStore``, else an adapter."""
    return adapt_checkpoints(store)


def approvals_contract(store: ApprovalStore) -> BaseApprovalStore:
    """``store`` itself if it subclasses ``BaseApprovalStore``, else an adapter."""
    return adapt_approvals(store)
