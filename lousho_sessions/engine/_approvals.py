"""Approval records and turn keys: the engine's half of approvals.

An approval record names the turn that waits on it twice: ``turn_id`` (the key of its
checkpoint, shown to users) and ``turn`` (``TurnKey.to_record()``: whether it is a session
turn or a single send, and whose). Records written before ``turn`` existed have only
``turn_id``; ``TurnKey.of_record`` reads both. ``decide`` records a decision (with edited
arguments checked as a model's are); ``approvals.Approvals`` is the face users call.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, Literal

import attrs

from ..errors import (
    ApprovalDecisionError,
    ApprovalNotFoundError,
    StoreCorruptError,
    ToolArgumentsError,
)
from ..inputs import check_json
from ..messages import ToolCall, thaw
from ..stores.adapters import adapt_approvals, takes_arguments
from ..stores.base import ApprovalStore
from ..tools import Tool

__all__ = ["ApprovalRequest", "TurnKey", "approval_id_for", "decide", "new_record"]


@attrs.frozen
class TurnKey:
    """Which turn: turn ``n`` of session ``key``, or the single send keyed ``key``.

    A durable single send (``agent.send(..., session_id=id)``) is keyed by its session
    id, a stateless one by its run id. ``turn_id`` is the key of the turn's checkpoint.
    """

    kind: Literal["session", "single"]
    key: str
    n: int | None = None

    @property
    def turn_id(self) -> str:
        return f"{self.key}.turn-{self.n}" if self.kind == "session" else f"{self.key}.send"

    def to_record(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "n": self.n}

    @classmethod
    def of_record(cls, record: Mapping[str, Any]) -> TurnKey | None:
        """The turn an approval record belongs to; None if it names none."""
        turn = record.get("turn")
        if isinstance(turn, Mapping):
            kind, key, n = turn.get("kind"), turn.get("key"), turn.get("n")
            if kind in ("session", "single") and isinstance(key, str):
                return cls(kind, key, n if isinstance(n, int) else None)
        # a record from before "turn" was written: the turn id says which kind
        turn_id = record.get("turn_id")
        if isinstance(turn_id, str):
            key, _, tail = turn_id.rpartition(".")
            if tail == "send" and key:
                return cls("single", key)
            if tail.startswith("turn-") and tail[5:].isdigit() and key:
                return cls("session", key, int(tail[5:]))
        session_id = record.get("session_id")
        return cls("session", session_id) if isinstance(session_id, str) else None


_NAMESPACE = uuid.UUID("6f1d2c8e-6a57-4c1e-9a61-4c2b8f6c7d10")


def approval_id_for(run_id: str, call_id: str) -> str:
    """The approval id of one tool call of one turn: the same after a crash and resume."""
    return "appr-" + uuid.uuid5(_NAMESPACE, f"{run_id}|{call_id}").hex


@attrs.frozen
class ApprovalRequest:
    """A tool call waiting for (or given) a human decision."""

    id: str
    session_id: str | None
    turn_id: str | None
    run_id: str
    call: ToolCall
    status: Literal["pending", "approved", "denied", "cancelled"] = "pending"
    reason: str | None = None
    created_at: str | None = None
    resolved_at: str | None = None
    #: why it is asked, when not for the tool's ``needs_approval``: "this call may have run; …"
    note: str | None = None
    #: the arguments an approver replaced the model's with (the tool runs with these;
    #: ``call.arguments`` stays what the model sent); ``None`` when not edited
    arguments: Mapping[str, Any] | None = None

    @property
    def tool(self) -> str:
        return self.call.name

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> ApprovalRequest:
        """The request a stored record describes; ``StoreCorruptError`` if it is malformed."""
        try:
            return cls._from_record(record)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            shown = str(record.get("id"))[:40] if isinstance(record, Mapping) else "?"
            raise StoreCorruptError(
                f"approval {shown!r}: not a valid approval record: {exc!r}"
            ) from exc

    @classmethod
    def _from_record(cls, record: Mapping[str, Any]) -> ApprovalRequest:
        call = record.get("call") or {}
        return cls(
            id=str(record["id"]),
            session_id=record.get("session_id"),
            turn_id=record.get("turn_id"),
            run_id=str(record.get("run_id", "")),
            call=ToolCall(
                str(call.get("id", "")), str(call.get("name", "")), call.get("arguments") or {}
            ),
            status=record.get("status", "pending"),
            reason=record.get("reason"),
            created_at=record.get("created_at"),
            resolved_at=record.get("resolved_at"),
            note=record.get("note"),
            arguments=record.get("arguments"),
        )


def new_record(
    approval_id: str,
    *,
    session_id: str | None,
    turn_id: str | None,
    run_id: str,
    call: ToolCall,
    turn: TurnKey | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    """A pending approval record; ``note`` says why it is asked when it is not the tool's
    ``needs_approval`` (a call that may have run: ``_effects.RERUN_NOTE``)."""
    record = {
        "id": approval_id,
        "session_id": session_id,
        "turn_id": turn_id,
        "turn": turn.to_record() if turn is not None else None,
        "run_id": run_id,
        "call": {"id": call.id, "name": call.name, "arguments": thaw(call.arguments)},
        "tool": call.name,
        "status": "pending",
        "reason": None,
        "created_at": datetime.now(timezone.utc).isoformat(),
        "resolved_at": None,
    }
    if note is not None:
        record["note"] = note
    return record


def decide(
    store: ApprovalStore,
    tools: Mapping[str, Tool],
    id: str,
    *,
    approved: bool,
    reason: str | None = None,
    arguments: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Record the decision on approval ``id`` (the store's compare-and-set); the record.

    ``arguments`` (only with ``approved=True``) replace the call's: they are checked as a
    model's are, against the schema of the call's tool in ``tools``, and recorded in the
    same compare-and-set as the decision. Whatever is wrong with them raises before
    anything is stored: ``ToolArgumentsError`` naming the argument that does not fit,
    ``ApprovalDecisionError`` for a denial with arguments, an unknown tool, or an
    approval to run again a call that may have run.
    """
    if arguments is None:
        return store.resolve(id, approved=approved, reason=reason)
    if not approved:
        raise ApprovalDecisionError(
            f"approval {id!r}: arguments= replaces a call's arguments only when approving "
            "(approved=True); a denied call does not run"
        )
    contract = adapt_approvals(store)
    if not takes_arguments(contract):
        raise ApprovalDecisionError(
            f"approval {id!r}: the approval store {type(store).__name__} cannot keep edited "
            "arguments (its resolve() takes no arguments=)"
        )
    record = contract.get(id)
    if record is None:
        raise ApprovalNotFoundError(f"no approval with id {id!r}")
    if record.get("status") == "pending":  # else resolve() below says it was decided
        arguments = _checked_arguments(ApprovalRequest.from_record(record), tools, arguments)
    return contract.resolve(id, approved=True, reason=reason, arguments=arguments)


def _checked_arguments(
    request: ApprovalRequest, tools: Mapping[str, Tool], arguments: Mapping[str, Any]
) -> dict[str, Any]:
    """``arguments`` as plain JSON if they fit the tool of ``request``, else the error."""
    where = f"approval {request.id!r}"
    if request.note is not None:
        raise ApprovalDecisionError(
            f"{where} asks whether to run again a call that may have run ({request.note}): "
            "its arguments cannot be changed"
        )
    tool = tools.get(request.tool)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        raise ApprovalDecisionError(
            f"{where}: this agent has no tool {request.tool!r} to check the edited arguments "
            f"against (tools: {known})"
        )
    try:
        tool.check_arguments(arguments)  # the strict check a model's arguments get
        check_json(arguments, f"edited arguments of {where}")  # NaN, depth, key types
    except ToolArgumentsError as exc:
        raise ToolArgumentsError(f"{where}: {exc}") from exc
    except (TypeError, ValueError) as exc:
        raise ToolArgumentsError(str(exc)) from exc
    return dict(thaw(arguments))
