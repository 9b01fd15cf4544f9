"""Every error the SDK raises.

::

    LoushoError
    ├── SessionBusyError                  code LOUSHO_SESSION_BUSY
    ├── SessionAwaitingApprovalError      code LOUSHO_SESSION_AWAITING_APPROVAL
    ├── InvalidSessionIdError (ValueError)
    ├── StoreError
    │   ├── StoreClosedError
    │   ├── SchemaVersionError
    │   ├── StoreCorruptError (ValueError)
    │   ├── StoreConflictError
    │   ├── LeaseLostError                code LOUSHO_LEASE_LOST
    │   └── CommitUnknownError            code LOUSHO_COMMIT_UNKNOWN
    ├── PropagatingToolError
    ├── ToolDefinitionError (TypeError, ValueError)  a @tool that cannot be described
    ├── ToolArgumentsError (TypeError)     a model's arguments that do not fit a tool
    ├── OutputValidationError (ValueError) a final answer that does not fit ``output_type``
    ├── ProviderError                     .status .retryable .request_id .retry_after
    │   └── ProviderConfigError (ValueError)
    ├── ApprovalNotFoundError (LookupError)
    ├── ApprovalAlreadyResolvedError
    └── ApprovalDecisionError (ValueError)  a decision that cannot be made as asked

Foreign errors are wrapped where they cross into the SDK, with ``raise … from exc``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ApprovalAlreadyResolvedError",
    "ApprovalCancelledError",
    "ApprovalDecisionError",
    "ApprovalNotFoundError",
    "CommitUnknownError",
    "DecryptionError",
    "InvalidSessionIdError",
    "LeaseLostError",
    "LoushoError",
    "MessageNotFoundError",
    "OutputValidationError",
    "PropagatingToolError",
    "ProviderConfigError",
    "ProviderError",
    "SchemaVersionError",
    "SessionAwaitingApprovalError",
    "SessionBusyError",
    "SessionExistsError",
    "StateTooLargeError",
    "StoreClosedError",
    "StoreConflictError",
    "StoreCorruptError",
    "StoreError",
    "ToolArgumentsError",
    "ToolDefinitionError",
]


class LoushoError(Exception):
    """Base class of every error raised by lousho_sessions."""

    code: str = "LOUSHO_ERROR"


class SessionBusyError(LoushoError):
    """A turn is running or waiting to start on this session."""

    code = "LOUSHO_SESSION_BUSY"


class SessionAwaitingApprovalError(LoushoError):
    """A durable turn of this session waits on an approval; resolve it first."""

    code = "LOUSHO_SESSION_AWAITING_APPROVAL"

    def __init__(self, message: str, *, approval_id: str | None) -> None:
        super().__init__(message)
        self.approval_id = approval_id


class InvalidSessionIdError(LoushoError, ValueError):
    """A session id that does not match ``^[A-Za-z0-9_-]{1,128}$``."""

    code = "LOUSHO_INVALID_SESSION_ID"


class InvalidApprovalError(LoushoError, ValueError):
    """An approval record or decision given to a store that is not one: not a mapping, a
    status that is not pending/approved/denied, ``approved`` not a bool, ``reason`` not text.

    What was given was wrong, not what is stored (that is ``StoreCorruptError``)."""

    code = "LOUSHO_INVALID_APPROVAL"


class StoreError(LoushoError):
    """A store could not do what was asked."""

    code = "LOUSHO_STORE_ERROR"


class StoreClosedError(StoreError):
    """The store was used after ``close()``."""

    code = "LOUSHO_STORE_CLOSED"


class SchemaVersionError(StoreError):
    """The stored data was written by a newer release of lousho_sessions."""

    code = "LOUSHO_SCHEMA_VERSION"


class StoreCorruptError(StoreError, ValueError):
    """Stored data cannot be read (not JSON, not SQLite, truncated); it is left as it is."""

    code = "LOUSHO_STORE_CORRUPT"


class DecryptionError(StoreError):
    """A sealed record could not be opened: no key with its key id, a wrong key, or a
    record altered or moved from another session. Names the session and the key id;
    nothing is returned in its place."""

    code = "LOUSHO_DECRYPTION"


class StoreConflictError(StoreError):
    """An append expected a transcript length the store no longer has."""

    code = "LOUSHO_STORE_CONFLICT"


class SessionExistsError(StoreConflictError):
    """A session was to be created (``fork``) under an id that is already stored."""

    code = "LOUSHO_SESSION_EXISTS"


class StateTooLargeError(LoushoError, ValueError):
    """A session's (or a scope's) state is larger than its limit; the message names the
    session and the size. Nothing was written."""


class MessageNotFoundError(LoushoError, LookupError, ValueError):
    """``rewind``/``edit``/``fork`` named a message id the transcript does not hold, or an
    index beyond its end."""

    code = "LOUSHO_MESSAGE_NOT_FOUND"


class LeaseLostError(StoreError):
    """A write carried a fence that is no longer its session's current one: the turn's
    lease was released, expired or taken over, so the write was refused and nothing changed."""

    code = "LOUSHO_LEASE_LOST"


class CommitUnknownError(StoreError):
    """A turn's commit was sent but its reply was lost, and the store could not be read again
    to tell whether it landed: the turn **may be saved**. Do not send it again blindly.

    Once the store answers again: ``session.pending()`` is not ``None`` when the turn was
    not saved (``resume()`` or the next ``send()`` finishes it without running its recorded
    tools again); otherwise it was saved, and ``session.load()`` holds its messages
    (``message_ids``, in order).
    """

    code = "LOUSHO_COMMIT_UNKNOWN"

    def __init__(self, message: str, *, session_id: str, message_ids: tuple[str, ...]) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.message_ids = message_ids

    def __reduce__(self) -> Any:
        return (_commit_unknown, (str(self), self.session_id, self.message_ids))


def _commit_unknown(
    message: str, session_id: str, message_ids: tuple[str, ...]
) -> CommitUnknownError:
    return CommitUnknownError(message, session_id=session_id, message_ids=message_ids)


class PropagatingToolError(LoushoError):
    """Raised by a tool to end the ``send()`` with this error instead of telling the model."""

    code = "LOUSHO_TOOL_ERROR"


class ToolDefinitionError(LoushoError, TypeError, ValueError):
    """``@tool`` cannot describe a function: a bad name or a parameter type with no JSON schema."""

    code = "LOUSHO_TOOL_DEFINITION"


class ToolArgumentsError(LoushoError, TypeError):
    """The arguments a model sent do not fit the tool's parameters; the tool was not run."""

    code = "LOUSHO_TOOL_ARGUMENTS"


class ProviderError(LoushoError):
    """The model call failed. ``retryable`` says whether trying again may help.

    ``status`` is the HTTP status (or what an in-stream error stands for),
    ``None`` for network and protocol failures; ``retry_after`` is the wait in
    seconds the server asked for, when it asked for one.
    """

    code = "LOUSHO_PROVIDER_ERROR"

    def __init__(
        self,
        status: int | None,
        message: str,
        retryable: bool = False,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message if status is None else f"{status}: {message}")
        self.status = status
        self.message = message
        self.retryable = retryable
        self.request_id = request_id
        self.retry_after = retry_after

    def __reduce__(
        self,
    ) -> tuple[type[ProviderError], tuple[int | None, str, bool, str | None, float | None]]:
        return (
            type(self),
            (self.status, self.message, self.retryable, self.request_id, self.retry_after),
        )


class ProviderConfigError(ProviderError, ValueError):
    """A provider was given a value it cannot use (an API key or header that HTTP cannot carry).

    Raised when the provider is made, before anything is sent; the message
    never shows the key.
    """

    code = "LOUSHO_PROVIDER_CONFIG"


class ApprovalNotFoundError(LoushoError, LookupError):
    """No approval has that id."""

    code = "LOUSHO_APPROVAL_NOT_FOUND"


class ApprovalAlreadyResolvedError(LoushoError):
    """The approval was resolved before (here or in another process)."""

    code = "LOUSHO_APPROVAL_ALREADY_RESOLVED"


class ApprovalCancelledError(ApprovalAlreadyResolvedError):
    """The approval's turn was dropped before it was resolved (the session was rewound, or
    its pending turn discarded): its status is ``"cancelled"`` and it can no longer be resolved."""

    code = "LOUSHO_APPROVAL_CANCELLED"


class ApprovalDecisionError(LoushoError, ValueError):
    """A decision that cannot be made as asked (nothing was recorded): ``arguments`` with a
    denial, edited arguments for a call this agent has no tool for, or for an approval to
    run again a call that may have run."""

    code = "LOUSHO_APPROVAL_DECISION"


class OutputValidationError(LoushoError, ValueError):
    """The model's final answer did not fit the turn's ``output_type``, repair rounds included.

    ``problems`` names each failure with its JSON path in the reply
    (``$.items[2].price: expected number, got string "ten"``); ``path`` is the first
    one's path; ``text`` is the reply that failed.
    """

    code = "LOUSHO_OUTPUT_INVALID"

    def __init__(
        self, message: str, *, problems: tuple[str, ...] = (), path: str = "$", text: str = ""
    ) -> None:
        super().__init__(message)
        self.problems = problems
        self.path = path
        self.text = text
