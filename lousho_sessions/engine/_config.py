"""``AgentConfig``: what an agent is, built once from ``create_agent``'s arguments."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ..compaction import Compaction
from ..pricing import Pricing
from ..providers.base import Provider
from ..results import Limits
from ..stores.adapters import store_parts
from ..stores.base import AgentStore, ApprovalStore
from ..stores.memory import MemoryApprovalStore, MemorySessionStore
from ..stores.urls import URLStore, open_store, store_from_environment
from ..tools import Tool, as_tool
from ._approvals import ApprovalRequest
from ._output import OutputSpec, output_spec

__all__ = [
    "AgentConfig",
    "AgentOptions",
    "Approve",
    "find_project_instructions",
    "resolve_provider",
]


#: Decides a tool call that needs approval: True/False, or None to pause the turn.
Approve = Callable[[ApprovalRequest], "bool | None"]


@attrs.frozen(kw_only=True)
class AgentOptions:
    """What ``create_agent`` was given, as one value: the keywords are written out once,
    in ``create_agent``'s signature, and travel as this object (``AgentConfig.build``)."""

    instructions: str | None = None
    provider: Provider | None = None
    model: str | None = None
    tools: Sequence[Tool | Callable[..., Any]] = ()
    store: Any = None
    limits: Limits | None = None
    approve: Approve | None = None
    project_instructions: bool | str | os.PathLike[str] = False
    compaction: Compaction | None = None
    pricing: Mapping[str, Pricing] | None = None
    max_steps: int = 20
    settings: Mapping[str, Any] | None = None
    check_key: bool = True
    name: str | None = None
    tracer_provider: Any = None
    meter_provider: Any = None
    trace_content: bool = False
    output_type: Any = None
    output_retries: int = 1


@attrs.frozen
class AgentConfig:
    """What an agent is: its model, instructions, tools, limits and stores. ``agent.config``."""

    provider: Provider
    #: the system prompt: the instructions, then the project instructions (AGENTS.md)
    system: str | None
    tools: Mapping[str, Tool]
    #: the agent's stores, part by part; a session's ``store=`` wins over them
    store: AgentStore
    #: where approval records live: the store's, else the runtime's memory
    approvals: ApprovalStore
    instructions: str | None = None
    model_name: str | None = None
    limits: Limits | None = None
    approve: Approve | None = None
    compaction: Compaction | None = None
    pricing: Mapping[str, Pricing] | None = None
    max_steps: int = 20
    settings: Mapping[str, Any] = attrs.field(factory=dict)
    #: the agent's name, in traces (``invoke_agent {name}``)
    name: str | None = None
    #: OpenTelemetry providers; None: the global ones (docs/operations.md)
    tracer_provider: Any = None
    meter_provider: Any = None
    #: put message content (prompts, answers, tool arguments and results) in spans
    trace_content: bool = False
    #: the store this agent opened from a URL (``store="sqlite:///..."``, ``LOUSHO_STORE``):
    #: the agent's to close
    opened_store: URLStore | None = None
    #: the type every final answer is parsed into (``output_type=``); None: free text
    output: OutputSpec | None = None
    #: repair rounds a reply that does not fit gets before ``OutputValidationError``
    output_retries: int = 1

    def output_for(self, output_type: Any) -> OutputSpec | None:
        """The output of a call given ``output_type`` (None: the agent's own)."""
        if output_type is None:
            return self.output
        return output_spec(output_type, self.output_retries)

    @classmethod
    def build(cls, options: AgentOptions) -> AgentConfig:
        """Check the arguments, resolve the provider, read AGENTS.md, make the tools."""
        o = options
        provider, model, store, pricing = o.provider, o.model, o.store, o.pricing
        max_steps, output_type, output_retries = o.max_steps, o.output_type, o.output_retries
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        if isinstance(output_retries, bool) or not isinstance(output_retries, int):
            raise TypeError(f"output_retries must be an int, got {output_retries!r}")
        if output_retries < 0:
            raise ValueError(f"output_retries must be >= 0, got {output_retries}")
        output = output_spec(output_type, output_retries) if output_type is not None else None
        if provider is None:
            model = model or os.environ.get("LOUSHO_MODEL") or "demo"
            provider = resolve_provider(model, pricing, check_key=o.check_key)
        project = find_project_instructions(o.project_instructions)
        parts = [p for p in (o.instructions, project) if p]
        built: dict[str, Tool] = {}
        for t in o.tools:
            one = as_tool(t)
            if one.name in built:
                raise ValueError(f"two tools are named {one.name!r}")
            built[one.name] = one
        opened = None
        if isinstance(store, str):
            store = opened = open_store(store)
        elif store is None:
            store = opened = store_from_environment()
        stores = store_parts(store)
        if stores.sessions is None:  # one per agent: session("u1") twice is one conversation
            stores = AgentStore(MemorySessionStore(), stores.checkpoints, stores.approvals)
        return cls(
            provider=provider,
            system="\n\n".join(parts) if parts else None,
            tools=built,
            store=stores,
            approvals=stores.approvals or MemoryApprovalStore(),
            instructions=o.instructions,
            model_name=getattr(provider, "model", None) or model,
            limits=o.limits,
            approve=o.approve,
            compaction=o.compaction,
            pricing=pricing,
            max_steps=max_steps,
            settings=dict(o.settings or {}),
            name=o.name,
            tracer_provider=o.tracer_provider,
            meter_provider=o.meter_provider,
            trace_content=o.trace_content,
            opened_store=opened,
            output=output,
            output_retries=output_retries,
        )


def resolve_provider(
    model: str, pricing: Mapping[str, Pricing] | None = None, *, check_key: bool = False
) -> Provider:
    """The provider a model string names ("demo", "openai/…", "anthropic/…", "ollama/…")."""
    from ..providers import registry

    return registry.provider_for(model, pricing=pricing, check_key=check_key)


def find_project_instructions(
    value: bool | str | os.PathLike[str], start: Path | None = None
) -> str | None:
    """The text of ``AGENTS.md``: the given file, or the nearest one upward from ``start``/cwd."""
    if value is False:
        return None
    if value is True:
        here = (start or Path.cwd()).resolve()
        for folder in (here, *here.parents):
            candidate = folder / "AGENTS.md"
            if candidate.is_file():
                return candidate.read_text(encoding="utf-8")
        return None
    path = Path(value)
    if not path.is_file():
        raise FileNotFoundError(f"project_instructions: no file at {str(path)!r}")
    return path.read_text(encoding="utf-8")
