"""``Approvals`` (``agent.approvals``): look up and resolve tool calls waiting for a human.

``ApprovalRequest`` (the typed view of a record), ``TurnKey``, ``approval_id_for``,
``new_record`` and ``decide`` live with the engine (``engine._approvals``) and are
re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from ._random import uuid4_hex
from .abort import AbortController
from .engine._approvals import (
    ApprovalRequest,
    TurnKey,
    approval_id_for,
    decide,
    new_record,
)
from .errors import (
    ApprovalNotFoundError,
)
from .events import RunDone
from .results import ExecutionResult
from .run import AgentRun
from .runtime import _worker
from .runtime._calls import Stoppable
from .stores.base import ApprovalStore
from .tools import Tool

__all__ = ["ApprovalRequest", "Approvals", "TurnKey", "approval_id_for", "decide", "new_record"]


#: Continues the turn an approval was resolved for, given the caller's ``context`` and
#: ``output_type``: its Future (the result, None if none was pending) and what stops it.
Resume = Callable[[TurnKey, Any, Any], Stoppable]
#: The same, streamed under the given run id.
ResumeStream = Callable[[TurnKey, Any, str, Any], AgentRun]


class Approvals:
    """``agent.approvals``: look up and resolve tool calls waiting for a human."""

    def __init__(
        self,
        store: ApprovalStore,
        resume: Resume,
        resume_stream: ResumeStream,
        check_output: Callable[[Any], object] = lambda output_type: None,
        tools: Mapping[str, Tool] | None = None,
    ) -> None:
        self._store = store
        self._tools: Mapping[str, Tool] = tools if tools is not None else {}
        self._resume = resume
        self._resume_stream = resume_stream
        self._check_output = check_output  # refuses a bad output_type before deciding

    def get(self, id: str) -> ApprovalRequest:
        record = self._store.get(id)
        if record is None:
            raise ApprovalNotFoundError(f"no approval with id {id!r}")
        return ApprovalRequest.from_record(record)

    def list(
        self, session_id: str | None = None, status: str | None = "pending"
    ) -> list[ApprovalRequest]:
        records = self._store.list(session_id=session_id, status=status)
        return [ApprovalRequest.from_record(r) for r in records]

    def resolve(
        self,
        id: str,
        *,
        approved: bool,
        reason: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        context: Any = None,
        output_type: Any = None,
    ) -> ExecutionResult | None:
        """Decide, then continue the paused turn as the session's next turn and return its result.

        ``id`` may be given by position or by name: ``resolve("appr-…", approved=True)``.
        ``None`` when no paused turn is left to continue (a single run without
        ``session_id`` paused in another agent's memory); the decision is recorded all
        the same. ``context`` is what the turn's tools see as ``ToolContext.context``;
        ``output_type`` what its answer is parsed into (else the agent's; docs/output.md).

        ``arguments`` (approving only) replace the call's: checked against the tool's
        schema as a model's are (``ToolArgumentsError`` before anything is recorded), the
        tool runs with them and the transcript shows the call with them (the model's
        are kept in the call's ``extra["original_arguments"]``).

        Exactly one ``resolve()`` of an approval wins, across processes; the others
        raise ``ApprovalAlreadyResolvedError``. Ctrl-C while the turn goes on aborts it
        (the decision stays recorded) and raises ``KeyboardInterrupt``.
        """
        steps = self._resolve_steps(id, approved, reason, context, output_type, arguments)
        return _worker.drive(steps)

    def _decide(
        self, id: str, approved: bool, reason: str | None, arguments: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        return decide(
            self._store, self._tools, id, approved=approved, reason=reason, arguments=arguments
        )

    def _resolve_steps(
        self,
        id: str,
        approved: bool,
        reason: str | None,
        context: Any,
        output_type: Any = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> _worker.Steps[ExecutionResult | None]:
        self._check_output(output_type)
        record = yield lambda: self._decide(id, approved, reason, arguments)
        turn = TurnKey.of_record(record)
        if turn is None:
            return None
        result: ExecutionResult | None = yield self._resume(turn, context, output_type)
        return result

    def resolve_stream(
        self,
        id: str,
        *,
        approved: bool,
        reason: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        context: Any = None,
        output_type: Any = None,
    ) -> AgentRun:
        """Decide, then stream the continued turn: an ``AgentRun`` of its events.

        The decision is made before this returns: a losing resolver gets
        ``ApprovalAlreadyResolvedError`` (an unknown id ``ApprovalNotFoundError``) from
        this call, and no run. The run's id is the paused turn's run id; it ends with
        ``run.done``, paused again (``approval.requested``) if the model asks for another
        approval. With no paused turn left to continue it yields only ``run.done`` with
        ``result`` None. Leaving the stream early aborts the turn, as for any stream.
        ``arguments`` as for ``resolve()``.
        """
        self._check_output(output_type)
        record = self._decide(id, approved, reason, arguments)
        return self._continue_stream(record, context, output_type)

    def _continue_stream(
        self, record: Mapping[str, Any], context: Any, output_type: Any = None
    ) -> AgentRun:
        """The run that continues the turn of a resolved approval ``record``."""
        run_id = str(record.get("run_id") or "run-" + uuid4_hex())
        turn = TurnKey.of_record(record)
        if turn is not None:
            return self._resume_stream(turn, context, run_id, output_type)
        done: Future[ExecutionResult | None] = Future()
        done.set_result(None)
        run = AgentRun(run_id, done, AbortController())
        run._push(RunDone(run_id, "none", None))
        return run
