"""Tools: ``@tool`` turns a typed function (plain or ``async def``) into something a model can call.

The JSON schema comes from the type hints, the description from the docstring's
first paragraph, and parameter descriptions from a Google-style ``Args:``
section. A first parameter typed ``ToolContext`` receives the call's context.
A model's arguments are checked against the hints before the function runs
(see ``_schema`` for the rule); a coroutine function runs on the agent's tool loop.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Union, overload

import attrs

from ..abort import AbortSignal
from ..errors import PropagatingToolError, ToolArgumentsError, ToolDefinitionError
from ..messages import thaw
from ..providers.base import ToolSpec
from ..runtime._tool_loop import ToolLoop, run_awaitable
from ._schema import Parameters, describe_parameters, json_schema, parse_doc

__all__ = [
    "Tool",
    "ToolContext",
    "ToolLoop",
    "ToolSpec",
    "as_tool",
    "json_schema",
    "tool",
    "tool_error_text",
]

log = logging.getLogger("lousho_sessions.tools")

#: The type of the object a caller passes as ``send(..., context=obj)``; ``Any`` when a
#: tool's hint is a bare ``ToolContext`` (a type-checker default: PEP 696).
if TYPE_CHECKING:
    from typing_extensions import TypeVar

    Deps = TypeVar("Deps", default=Any)
else:
    from typing import TypeVar

    Deps = TypeVar("Deps")


@attrs.frozen
class ToolContext(Generic[Deps]):
    """What a tool may know about its call; ``ToolContext[MyDeps]`` types ``context``.

    ``idempotency_key`` is the same every time this call runs, also after a crash
    and ``resume()`` in another process: use it to make side effects idempotent.
    ``context`` is the object given as ``send(..., context=obj)`` (or ``stream``,
    ``resume``, ``approvals.resolve``) by the call that runs the turn now; ``None``
    when that call gave none. It is never saved: a turn finished by ``resume()`` after
    a crash sees the resuming call's ``context=``. The type parameter is a promise
    you make, not checked at run time.

    ``state`` is the session's state (``Session.state``) as this turn sees it: tools read
    and change it in place; the turn's changes are stored in the same commit as its
    messages and dropped with an aborted turn.
    """

    session_id: str | None
    run_id: str
    call_id: str
    signal: AbortSignal
    idempotency_key: str
    context: Deps = attrs.field(default=None, kw_only=True)
    #: the session's state for this turn (a JSON object): changes are committed with the
    #: turn's messages, kept in its checkpoint, and dropped if the turn is aborted
    state: dict[str, Any] = attrs.field(factory=dict, kw_only=True)


NeedsApproval = Union[bool, Callable[[Mapping[str, Any]], bool]]
#: Asks the outside system whether an interrupted call happened (``ctx.idempotency_key``):
#: its result text if it did, ``None`` if it did not (then the call runs).
Reconcile = Callable[[ToolContext[Any]], Union[str, None]]


def _parameters_of(tool: Tool) -> Parameters:
    return describe_parameters(tool.fn, tool.name, ToolContext)


def _spec_of(tool: Tool) -> ToolSpec:
    return ToolSpec(tool.name, tool.description, tool.parameters)


@attrs.frozen
class Tool:
    """A callable the model may use. Build one with :func:`tool`.

    ``raise_errors=True``: an exception from the function ends the turn as a
    ``PropagatingToolError`` (its ``__cause__`` is the exception) instead of
    becoming an error result the model sees.

    ``idempotent`` (default ``True``, as before it existed): running the call twice does
    no harm, so a call a crash interrupted runs again on resume. ``idempotent=False``:
    the call's start is recorded first, and an interrupted call is not run again
    unless ``reconcile(ctx)`` says it did not happen (``None``) — it returns the
    result text when it did — or, without ``reconcile``, a human approves running it
    again (the turn parks as awaiting approval). See docs/durable.md.

    ``read_only`` (default ``False``): the call changes nothing anywhere (a search, a
    lookup; MCP's ``readOnlyHint``). A durable turn whose step calls only such tools does
    not save the model's response before they run: it saves the response with their
    results once the next model request has left, one write in the model's wait instead
    of one before the tools and one after. A crash while they run asks the model again.
    A read-only tool is idempotent (``idempotent=False`` with it is refused).
    """

    fn: Callable[..., Any]
    name: str
    description: str
    parameters: Mapping[str, Any]
    needs_approval: NeedsApproval = False
    takes_context: bool = False
    raise_errors: bool = False
    idempotent: bool = True
    reconcile: Reconcile | None = None
    read_only: bool = False
    signature: Parameters = attrs.field(
        default=attrs.Factory(_parameters_of, takes_self=True), eq=False, repr=False
    )
    #: what the model is told about the tool: made once (every model call sends it, and a
    #: provider compares it with the previous call's by identity first)
    spec: ToolSpec = attrs.field(
        init=False, default=attrs.Factory(_spec_of, takes_self=True), eq=False, repr=False
    )

    @property
    def is_async(self) -> bool:
        """True for an ``async def`` function (run on the agent's tool loop)."""
        return inspect.iscoroutinefunction(self.fn) or inspect.iscoroutinefunction(
            getattr(self.fn, "__call__", None)  # noqa: B004 - an object with an async __call__
        )

    def requires_approval(self, arguments: Mapping[str, Any]) -> bool:
        if callable(self.needs_approval):
            return bool(self.needs_approval(thaw(arguments)))
        return bool(self.needs_approval)

    def check_arguments(self, arguments: Any) -> dict[str, Any]:
        """``arguments`` converted to the parameters' types; ``ToolArgumentsError`` if they do not fit."""
        return self.signature.check(self.name, arguments)

    def invoke(
        self,
        arguments: Mapping[str, Any],
        context: ToolContext[Any],
        *,
        loop: ToolLoop | None = None,
    ) -> str:
        """Check the arguments, run the tool, and give its return value as text (JSON unless a ``str``).

        Raises ``ToolArgumentsError`` (the function is not called) when the arguments do
        not fit; an exception from the function is logged at WARNING on
        ``lousho_sessions.tools`` with its traceback and raised again (as
        ``PropagatingToolError`` when ``raise_errors``). An awaitable result is
        awaited on ``loop`` (a new loop on this thread when ``None``).
        """
        try:
            args = self.check_arguments(arguments)
        except ToolArgumentsError as exc:
            log.info("tool %r (call %s): %s", self.name, context.call_id, exc)
            raise
        try:
            result = self.fn(context, **args) if self.takes_context else self.fn(**args)
            if inspect.isawaitable(result):
                if loop is not None:
                    result = loop.run(result, context.signal)
                else:
                    result = run_awaitable(result, context.signal)
        except PropagatingToolError:
            raise
        except Exception as exc:
            if self.raise_errors:
                raise PropagatingToolError(
                    f"tool {self.name!r} raised {type(exc).__name__}: {exc}"
                ) from exc
            if not context.signal.aborted:
                log.warning(
                    "tool %r (call %s, run %s) raised %s",
                    self.name,
                    context.call_id,
                    context.run_id,
                    type(exc).__name__,
                    exc_info=True,
                )
            raise
        if isinstance(result, str):
            return result
        return json.dumps(result, default=str)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def tool_error_text(exc: BaseException) -> str:
    """What the model reads when a call fails: ``Error: <type>: <message>``."""
    if isinstance(exc, ToolArgumentsError):
        return (
            f"Error: TypeError: {exc}. The tool was not run; "
            "call it again with arguments that fit its schema."
        )
    return f"Error: {type(exc).__name__}: {exc}"


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: NeedsApproval = False,
    raise_errors: bool = False,
    idempotent: bool = True,
    reconcile: Reconcile | None = None,
    read_only: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: NeedsApproval = False,
    raise_errors: bool = False,
    idempotent: bool = True,
    reconcile: Reconcile | None = None,
    read_only: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a ``Tool`` of ``fn``; use bare (``@tool``) or with options (``@tool(needs_approval=True)``).

    Raises ``ToolDefinitionError`` (a ``TypeError`` and ``ValueError``) naming the tool
    and the parameter when a name is invalid or a parameter type has no JSON schema,
    or ``reconcile`` is given but is not callable, or ``read_only`` with
    ``idempotent=False``. ``idempotent``, ``reconcile`` and ``read_only``: see ``Tool``.
    """
    if reconcile is not None and not callable(reconcile):
        raise ToolDefinitionError(
            f"reconcile must be a callable taking the ToolContext, got {reconcile!r}"
        )

    def build(f: Callable[..., Any]) -> Tool:
        tool_name = name or getattr(f, "__name__", None)
        if not tool_name or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", tool_name):
            raise ToolDefinitionError(
                f"invalid tool name {tool_name!r}: tool names must match ^[A-Za-z0-9_-]{{1,64}}$"
            )
        if read_only and not idempotent:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: read_only=True with idempotent=False: a call that "
                "changes nothing can run again (drop one of them)"
            )
        signature = describe_parameters(f, tool_name, ToolContext)
        doc_summary, _ = parse_doc(inspect.getdoc(f) or "")
        return Tool(
            fn=f,
            name=tool_name,
            description=description if description is not None else doc_summary,
            parameters=signature.schema,
            needs_approval=needs_approval,
            takes_context=signature.takes_context,
            raise_errors=raise_errors,
            idempotent=bool(idempotent),
            reconcile=reconcile,
            read_only=bool(read_only),
            signature=signature,
        )

    if fn is not None:
        return build(fn)
    return build


def as_tool(obj: Tool | Callable[..., Any]) -> Tool:
    """``obj`` if it is a ``Tool``, else ``tool(obj)``."""
    if isinstance(obj, Tool):
        return obj
    if callable(obj):
        return tool(obj)
    raise TypeError(f"not a tool or a callable: {obj!r}")
