"""lousho_sessions: durable multi-turn sessions for AI agents.

Synchronous first: every call blocks and returns a value; ``lousho_sessions.aio``
awaits the same work. ``import lousho_sessions`` never imports sqlite3.
"""

from .abort import AbortController, AbortSignal
from .agent import Agent, AgentExecutor, create_agent
from .approvals import ApprovalRequest, Approvals
from .compaction import Compaction
from .encryption import Encryption
from .engine._turn import CHECKPOINT_VERSION
from .errors import (
    ApprovalAlreadyResolvedError,
    ApprovalDecisionError,
    ApprovalNotFoundError,
    CommitUnknownError,
    DecryptionError,
    InvalidApprovalError,
    InvalidSessionIdError,
    LeaseLostError,
    LoushoError,
    OutputValidationError,
    PropagatingToolError,
    ProviderConfigError,
    ProviderError,
    SchemaVersionError,
    SessionAwaitingApprovalError,
    SessionBusyError,
    StateTooLargeError,
    StoreClosedError,
    StoreConflictError,
    StoreCorruptError,
    StoreError,
    ToolArgumentsError,
    ToolDefinitionError,
)
from .events import Event
from .inputs import Input
from .messages import ImagePart, Message, Part, ReasoningPart, TextPart, ToolCall, Usage
from .pricing import Pricing, register_pricing
from .providers.anthropic import AnthropicProvider
from .providers.base import (
    ModelEvent,
    ModelRequest,
    ModelResponse,
    OutputSchema,
    Provider,
    ToolSpec,
)
from .providers.caching import CachePolicy
from .providers.demo import DemoProvider
from .providers.function import FunctionProvider, ScriptedProvider
from .providers.gemini import GeminiProvider
from .providers.openai import OpenAIProvider
from .providers.openai_responses import OpenAIResponsesProvider
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
    "ApprovalDecisionError",
    "ApprovalNotFoundError",
    "ApprovalRequest",
    "ApprovalStore",
    "Approvals",
    "BaseApprovalStore",
    "BaseCheckpointStore",
    "BaseSessionStore",
    "CachePolicy",
    "CheckpointStore",
    "CommitUnknownError",
    "Compaction",
    "CompactionResult",
    "DecryptionError",
    "DemoProvider",
    "Encryption",
    "Event",
    "ExecutionResult",
    "FileApprovalStore",
    "FileCheckpointStore",
    "FileSessionStore",
    "FunctionProvider",
    "GeminiProvider",
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
    "OpenAIResponsesProvider",
    "OutputSchema",
    "OutputValidationError",
    "Part",
    "PendingTurn",
    "Pricing",
    "PropagatingToolError",
    "Provider",
    "ProviderConfigError",
    "ProviderError",
    "PruneResult",
    "ReasoningPart",
    "SchemaVersionError",
    "ScriptedProvider",
    "Session",
    "SessionAwaitingApprovalError",
    "SessionBusyError",
    "SessionStore",
    "StateTooLargeError",
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
    "register_pricing",
    "tool",
]
