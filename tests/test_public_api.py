"""The public names of SPEC 1 are importable from the root, and ``__all__`` is sorted."""

from __future__ import annotations

import subprocess
import sys

import lousho_sessions

SPEC_NAMES = """
create_agent Agent Session AgentRun ExecutionResult PendingTurn
AgentExecutor ApprovalRequest Compaction CompactionResult PruneResult
Message TextPart ImagePart ToolCall ToolSpec Usage Limits Pricing
tool Tool ToolContext AbortController AbortSignal
MemorySessionStore FileSessionStore FileCheckpointStore FileApprovalStore
memory_store file_store AgentStore
SessionStore CheckpointStore ApprovalStore
FunctionProvider ScriptedProvider DemoProvider OpenAIProvider AnthropicProvider
ModelRequest ModelEvent ModelResponse Provider
LoushoError SessionBusyError SessionAwaitingApprovalError InvalidSessionIdError
StoreClosedError SchemaVersionError StoreCorruptError PropagatingToolError
StoreError LeaseLostError Lease BaseSessionStore BaseCheckpointStore BaseApprovalStore
ProviderError ApprovalNotFoundError ApprovalAlreadyResolvedError
""".split()


def test_spec_names_are_exported() -> None:
    missing = [name for name in SPEC_NAMES if not hasattr(lousho_sessions, name)]
    assert missing == []
    assert set(SPEC_NAMES) <= set(lousho_sessions.__all__)


def test_all_is_sorted_and_real() -> None:
    names = list(lousho_sessions.__all__)
    assert names == sorted(
        names, key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n)
    )
    for name in names:
        assert hasattr(lousho_sessions, name), name


def test_every_error_is_a_lousho_error_with_a_code() -> None:
    errors = [getattr(lousho_sessions, n) for n in SPEC_NAMES if n.endswith("Error")]
    for error in errors:
        assert issubclass(error, lousho_sessions.LoushoError)
        assert error.code.startswith("LOUSHO_")
    assert issubclass(lousho_sessions.InvalidSessionIdError, ValueError)
    assert issubclass(lousho_sessions.StoreCorruptError, ValueError)
    assert lousho_sessions.SessionBusyError.code == "LOUSHO_SESSION_BUSY"
    assert lousho_sessions.SessionAwaitingApprovalError.code == "LOUSHO_SESSION_AWAITING_APPROVAL"


def test_optional_backends_are_not_imported_by_the_root() -> None:
    code = (
        "import sys, lousho_sessions\n"
        "bad = [m for m in ('sqlite3', 'redis', 'psycopg', 'asyncio') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_py_typed_is_shipped() -> None:
    from pathlib import Path

    assert (Path(lousho_sessions.__file__).parent / "py.typed").exists()
