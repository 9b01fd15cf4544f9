"""lousho_sessions: durable multi-turn sessions for AI agents.

Synchronous first: every call blocks and returns a value; ``lousho_sessions.aio``
awaits the same work. ``import lousho_sessions`` never imports sqlite3.
"""

from ._turn import CHECKPOINT_VERSION
from .abort import AbortController, AbortSignal
from .agent import Agent, AgentExecutor, create_agent
from .approvals import ApprovalRequest, Approvals
from .compaction import Compaction
from .errors import (
    ApprovalAlreadyResolvedError,
    ApprovalNotFoundError,
    InvalidApprovalError,
    InvalidSessionIdError,
    LeaseLostError,
    LoushoError,
    PropagatingToolError,
    ProviderConfigError,
    ProviderError,
    SchemaVersionError,
    SessionAwaitingApprovalError,
    SessionBusyError,
    StoreClosedError,
    StoreConflictError,
    StoreCorruptError,
    StoreError,
    ToolArgumentsError,
    ToolDefinitionError,
)
from .events import Event
from .inputs import Input
from .messages import ImagePart, Message, Part, TextPart, ToolCall, Usage
from .pricing import Pricing
from .providers.anthropic import AnthropicProvider
from .providers.base import ModelEvent, ModelRequest, ModelResponse, Provider, ToolSpec
from .providers.demo import DemoProvider
from .providers.function import FunctionProvider, ScriptedProvider
from .providers.openai import OpenAIProvider
from .results import CompactionResult, ExecutionResult, Limits, PendingTurn
from .run import AgentRun
from .session import Session
from .stores.base import (
    AgentStore,
    ApprovalStore,
    BaseApprovalStore,
    BaseCheckpointStore,
    BaseSessionStore,
    CheckpointStore,
    PruneResult,
    SessionStore,
)
from .stores.files import FileApprovalStore, FileCheckpointStore, FileSessionStore, file_store
from .stores.lease import Lease
from .stores.memory import (
    MemoryApprovalStore,
    MemoryCheckpointStore,
    MemorySessionStore,
    memory_store,
)
from .stores.urls import open_store
from .tools import Tool, ToolContext, tool

__version__ = "0.1.0"

__all__ = [
    "CHECKPOINT_VERSION",
    "AbortController",
    "AbortSignal",
    "Agent",
    "AgentExecutor",
    "AgentRun",
    "AgentStore",
    "AnthropicProvider",
    "ApprovalAlreadyResolvedError",
    "ApprovalNotFoundError",
    "ApprovalRequest",
    "ApprovalStore",
    "Approvals",
    "BaseApprovalStore",
    "BaseCheckpointStore",
    "BaseSessionStore",
    "CheckpointStore",
    "Compaction",
    "CompactionResult",
    "DemoProvider",
    "Event",
    "ExecutionResult",
    "FileApprovalStore",
    "FileCheckpointStore",
    "FileSessionStore",
    "FunctionProvider",
    "ImagePart",
    "Input",
    "InvalidApprovalError",
    "InvalidSessionIdError",
    "Lease",
    "LeaseLostError",
    "Limits",
    "LoushoError",
    "MemoryApprovalStore",
    "MemoryCheckpointStore",
    "MemorySessionStore",
    "Message",
    "ModelEvent",
    "ModelRequest",
    "ModelResponse",
    "OpenAIProvider",
    "Part",
    "PendingTurn",
    "Pricing",
    "PropagatingToolError",
    "Provider",
    "ProviderConfigError",
    "ProviderError",
    "PruneResult",
    "SchemaVersionError",
    "ScriptedProvider",
    "Session",
    "SessionAwaitingApprovalError",
    "SessionBusyError",
    "SessionStore",
    "StoreClosedError",
    "StoreConflictError",
    "StoreCorruptError",
    "StoreError",
    "TextPart",
    "Tool",
    "ToolArgumentsError",
    "ToolCall",
    "ToolContext",
    "ToolDefinitionError",
    "ToolSpec",
    "Usage",
    "create_agent",
    "file_store",
    "memory_store",
    "open_store",
    "tool",
]
