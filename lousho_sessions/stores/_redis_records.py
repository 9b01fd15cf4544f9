"""The checkpoints and approvals of a ``RedisStore`` (``lousho_sessions.stores.redis``).

Both live under their session's hash tag, so a fenced write checks the session's
lease in the same script. Approvals are found by id through one more hash, the
approval index ``<prefix>:approval-index`` (``approval id -> session id``), a key
of its own slot: it is written in a command of its own after the record's script
(never a script across slots). A crash between the two leaves a record the index
does not name (``get`` does not find it; ``list(session_id=...)`` does) or an entry
naming no record (ignored); ``prune`` repairs both.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

from ..errors import ApprovalAlreadyResolvedError, ApprovalNotFoundError, StoreCorruptError
from ._approval_records import check_new_approval
from ._redis_base import NO_SESSION, RedisConnection, text
from .base import (
    SESSION_ID_PATTERN,
    BaseApprovalStore,
    BaseCheckpointStore,
    PruneResult,
    approval_sort_key,
    check_approval_record,
    decode_json_object,
    older_than_seconds,
    resolved_approval,
    validate_approval_id,
    validate_turn_id,
)
from .lease import fence_session_id

__all__ = ["RedisApprovalStore", "RedisCheckpointStore"]

log = logging.getLogger("lousho_sessions.stores.redis")

_SESSION_ID = re.compile(SESSION_ID_PATTERN)
_RESOLVE_TRIES = 50


def _fence(fence: int | None) -> str:
    return "" if fence is None else str(int(fence))


class _Part:
    fenced_writes = True

    def __init__(self, store: RedisConnection) -> None:
        self.store = store

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store.where})"


class RedisCheckpointStore(_Part, BaseCheckpointStore):
    """The checkpoints of a ``RedisStore``: a hash per session, turn id -> checkpoint JSON.

    ``list(prefix)`` reads one hash when ``prefix`` names a session (contains a
    ``.``); otherwise it walks the checkpoint hashes with ``SCAN``.
    """

    checks_json = True  # saved through encode_json_object (the sealing's record_text)

    def load(self, turn_id: str) -> dict[str, Any] | None:
        validate_turn_id(turn_id)
        sid = fence_session_id(turn_id)
        with self.store.call(f"load checkpoint {turn_id!r}") as client:
            value = client.hget(self.store.key(sid, "checkpoints"), turn_id)
        if value is None:
            return None
        source = f"{self.store.where}: checkpoint {turn_id!r}"
        return self.store.sealing.record(
            "checkpoint", sid, text(value, source=source), source=source
        )

    def save(
        self, turn_id: str, checkpoint: Mapping[str, Any], *, fence: int | None = None
    ) -> None:
        validate_turn_id(turn_id)
        sid = fence_session_id(turn_id)
        body = self.store.sealing.record_text(
            "checkpoint", sid, checkpoint, what=f"checkpoint {turn_id!r}"
        )
        reply = self.store.run(
            "CHECKPOINT_SAVE",
            sid,
            turn_id,
            body,
            _fence(fence),
            self.store.ttl_arg(sid),
            what=f"save checkpoint {turn_id!r}",
        )
        if text(reply[0], source="checkpoint save") == "lease-lost":
            raise self.store.lease_lost(sid, fence, reply[1])

    def delete(self, turn_id: str, *, fence: int | None = None) -> None:
        validate_turn_id(turn_id)
        sid = fence_session_id(turn_id)
        reply = self.store.run(
            "CHECKPOINT_DELETE",
            sid,
            turn_id,
            _fence(fence),
            self.store.ttl_arg(sid),
            what=f"delete checkpoint {turn_id!r}",
        )
        if text(reply[0], source="checkpoint delete") == "lease-lost":
            raise self.store.lease_lost(sid, fence, reply[1])

    def list(self, prefix: str = "") -> list[str]:
        """The stored turn ids that start with ``prefix``, sorted."""
        head = prefix.split(".", 1)[0]
        if head and not _SESSION_ID.fullmatch(head):
            return []  # no session id starts so: nothing to find
        if "." in prefix:
            keys = [self.store.key(head, "checkpoints")]
        else:
            keys = sorted(set(self.store.scan(f"{self.store.prefix}:{{{head}*}}:checkpoints")))
        found: set[str] = set()
        with self.store.call("list checkpoints") as client:
            for key in keys:
                for field in client.hkeys(key):
                    turn_id = text(field, source=key)
                    if turn_id.startswith(prefix):
                        found.add(turn_id)
        return sorted(found)

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete the checkpoints not written within ``older_than``."""
        cutoff = self.store.server_time_us() - round(older_than_seconds(older_than) * 1e6)
        return self.prune_before(cutoff)

    def prune_before(self, cutoff_us: int) -> PruneResult:
        deleted = 0
        for key in set(self.store.scan(f"{self.store.prefix}:{{*}}:checkpoint-times")):
            sid = self.store.session_of(key)
            deleted += int(
                self.store.run(
                    "CHECKPOINT_PRUNE", sid, str(cutoff_us), self.store.ttl_arg(sid), what="prune"
                )
            )
        return PruneResult(sessions=0, checkpoints=deleted, approvals=0)


class RedisApprovalStore(_Part, BaseApprovalStore):
    """The approval records of a ``RedisStore``; ``resolve`` is a compare-and-set script.

    Records live in their session's hash (records whose ``session_id`` is not a
    session id share the group ``{~}``); the approval index finds them by id.
    ``list()`` skips a record it cannot read, logging a WARNING; ``corrupt()``
    names them.
    """

    def _group(self, session_id: object) -> str:
        if isinstance(session_id, str) and _SESSION_ID.fullmatch(session_id):
            return session_id
        return NO_SESSION

    def _indexed(self, id: str) -> str | None:
        with self.store.call(f"find approval {id!r}") as client:
            group = client.hget(self.store.approval_index, id)
        return None if group is None else text(group, source=self.store.approval_index)

    def _raw(self, group: str, id: str) -> Any:
        with self.store.call(f"read approval {id!r}") as client:
            return client.hget(self.store.key(group, "approvals"), id)

    def create(self, record: Mapping[str, Any], *, fence: int | None = None) -> None:
        """Store a new record; ``ValueError`` if one with its ``id`` exists or it is malformed."""
        approval_id = validate_approval_id(check_new_approval(record).get("id"))
        body = self.store.sealing.record_text(
            "approval", _sid(record.get("session_id")), record, what=f"approval {approval_id!r}"
        )
        group = self._group(record.get("session_id"))
        known = self._indexed(approval_id)
        if known is not None and self._raw(known, approval_id) is not None:
            raise ValueError(f"approval {approval_id!r} exists already ({self.store.where})")
        reply = self.store.run(
            "APPROVAL_CREATE",
            group,
            approval_id,
            body,
            _fence(fence),
            "1" if record.get("status") == "pending" else "0",
            self.store.ttl_arg(group),
            what=f"create approval {approval_id!r}",
        )
        outcome = text(reply[0], source="approval create")
        if outcome == "lease-lost":
            raise self.store.lease_lost(group, fence, reply[1])
        with self.store.call(f"index approval {approval_id!r}") as client:
            client.hset(self.store.approval_index, approval_id, group)  # repairs it if "exists"
        if outcome == "exists":
            raise ValueError(f"approval {approval_id!r} exists already ({self.store.where})")

    def get(self, id: str) -> dict[str, Any] | None:
        validate_approval_id(id)
        group = self._indexed(id)
        raw = None if group is None else self._raw(group, id)
        return None if raw is None else self._decode(id, raw)

    def resolve(
        self,
        id: str,
        *,
        approved: bool,
        reason: str | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        validate_approval_id(id)
        for _ in range(_RESOLVE_TRIES):
            group = self._indexed(id)
            raw = None if group is None else self._raw(group, id)
            if group is None or raw is None:
                raise ApprovalNotFoundError(f"no approval with id {id!r} in {self.store.where}")
            record = resolved_approval(
                self._decode(id, raw),
                approved=approved,
                reason=reason,
                source=repr(id),
                arguments=arguments,
            )
            outcome = text(
                self.store.run(
                    "APPROVAL_RESOLVE",
                    group,
                    id,
                    raw,
                    self.store.sealing.record_text(
                        "approval", _sid(record.get("session_id")), record, what=f"approval {id!r}"
                    ),
                    self.store.ttl_arg(group),
                    what=f"resolve approval {id!r}",
                ),
                source="approval resolve",
            )
            if outcome == "ok":
                return record
            if outcome == "missing":
                raise ApprovalNotFoundError(f"no approval with id {id!r} in {self.store.where}")
            if outcome == "resolved":
                raise ApprovalAlreadyResolvedError(f"approval {id!r} was already resolved")
            # "changed": another writer got there between the read and the script; read again
        raise StoreCorruptError(
            f"{self.store.where}: approval {id!r} changed on every one of {_RESOLVE_TRIES} tries"
        )

    def list(
        self, session_id: str | None = None, status: str | None = "pending"
    ) -> list[dict[str, Any]]:
        groups = [self._group(session_id)] if session_id is not None else self._groups()
        records = []
        for id, raw in self._records(groups):
            try:
                record = self._decode(id, raw)
            except StoreCorruptError as exc:
                log.warning("skipping unreadable approval record: %s", exc)
                continue
            if session_id is not None and record.get("session_id") != session_id:
                continue
            if status is not None and record.get("status") != status:
                continue
            records.append(record)
        return sorted(records, key=approval_sort_key)

    def corrupt(self) -> dict[str, str]:
        """The approval records ``list`` skips: approval id -> what is wrong."""
        keys = set(self.store.scan(f"{self.store.prefix}:{{*}}:approvals"))
        found = {}
        for id, raw in self._records(sorted(self.store.session_of(k) for k in keys)):
            try:
                self._decode(id, raw)
            except StoreCorruptError as exc:
                found[id] = str(exc)
        return found

    def delete(self, id: str) -> None:
        validate_approval_id(id)
        group = self._indexed(id)
        if group is None:
            return
        self.store.run(
            "APPROVAL_DELETE", group, id, self.store.ttl_arg(group), what=f"delete approval {id!r}"
        )
        self._forget(id, group)

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete the records resolved more than ``older_than`` ago; pending ones stay."""
        cutoff = self.store.server_time_us() - round(older_than_seconds(older_than) * 1e6)
        return self.prune_before(cutoff)

    def prune_before(self, cutoff_us: int) -> PruneResult:
        """Delete resolved records older than ``cutoff_us``, then repair the approval index."""
        deleted = 0
        for key in set(self.store.scan(f"{self.store.prefix}:{{*}}:approval-states")):
            group = self.store.session_of(key)
            ids = self.store.run(
                "APPROVAL_PRUNE", group, str(cutoff_us), self.store.ttl_arg(group), what="prune"
            )
            for raw_id in ids:
                self._forget(text(raw_id, source=key), group)
            deleted += len(ids)
        self._repair_index()
        return PruneResult(sessions=0, checkpoints=0, approvals=deleted)

    # -- helpers ------------------------------------------------------------------

    def _groups(self) -> Sequence[str]:
        groups: set[str] = set()
        with self.store.call("read the approval index") as client:
            for _, group in client.hscan_iter(self.store.approval_index, count=500):
                groups.add(text(group, source=self.store.approval_index))
        return sorted(groups)

    def _records(self, groups: Sequence[str]) -> Iterator[tuple[str, Any]]:
        with self.store.call("read approvals") as client:
            for group in groups:
                for id, raw in client.hgetall(self.store.key(group, "approvals")).items():
                    yield text(id, source=group), raw

    def _forget(self, id: str, group: str) -> None:
        self.store.run_on(
            "INDEX_FORGET", [self.store.approval_index], id, group, what="approval index"
        )

    def _repair_index(self) -> None:
        """Drop index entries naming no record (deleted, expired); add records it misses."""
        index = self.store.approval_index
        with self.store.call("read the approval index") as client:
            entries = {
                text(id, source=index): text(group, source=index)
                for id, group in client.hscan_iter(index, count=500)
            }
        for id, group in entries.items():
            if self._raw(group, id) is None:
                self._forget(id, group)
        keys = set(self.store.scan(f"{self.store.prefix}:{{*}}:approvals"))
        with self.store.call("repair the approval index") as client:
            for key in keys:
                group = self.store.session_of(key)
                for field in client.hkeys(key):
                    client.hsetnx(index, text(field, source=key), group)

    def _decode(self, id: str, raw: Any) -> dict[str, Any]:
        source = f"{self.store.where}: approval {id!r}"
        data = decode_json_object(text(raw, source=source), source=source)
        data = self.store.sealing.open_record(
            "approval", _sid(data.get("session_id")), data, source=source
        )
        return check_approval_record(data, source=source)


def _sid(session_id: object) -> str | None:
    """An approval record's session id, as its sealing binds it."""
    return session_id if isinstance(session_id, str) else None
