"""Which failures end a turn for good and which keep it for ``resume()``.

A *transient* failure may not happen again when the same turn is tried later:
the network, a rate limit, an overloaded server, a full disk, a crash, an abort,
a ``PropagatingToolError``. A durable turn that fails so keeps its checkpoint,
and ``resume()`` or the session's next ``send()`` finishes it.

A *permanent* failure would happen again on every try: the model server refused
the request (a 4xx other than 408, 409 and 429), the turn holds something that
cannot be encoded or saved (a lone surrogate, NaN, nesting too deep for JSON).
Such a turn ends: its checkpoint is dropped, the transcript stays as it was,
the error is raised once, and the session takes new turns as before.

The rule follows the chain of ``__cause__``/``__context__`` from the error that
was raised; the first error in it that decides wins. An error that nothing in
the chain decides (a ``RuntimeError`` from a model function, say) is transient:
keeping a turn only delays it (``discard_pending()`` drops it), dropping one
would lose the tool calls that already ran.
"""

from __future__ import annotations

from .abort import AbortedError
from .errors import PropagatingToolError, ProviderError, StoreError

__all__ = ["is_permanent"]

#: 4xx statuses that say "try again later", not "this request is wrong".
RETRY_STATUSES = frozenset({408, 409, 429})


def is_permanent(error: BaseException) -> bool:
    """True when ``error`` would fail the same turn again on every try (see the module doc)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        verdict = _decide(current)
        if verdict is not None:
            return verdict
        current = current.__cause__ or current.__context__
    return False


def _decide(error: BaseException) -> bool | None:
    """True: permanent; False: transient; None: look further down the chain."""
    if not isinstance(error, Exception):  # KeyboardInterrupt, SystemExit: like a crash
        return False
    if isinstance(error, ProviderError):
        if error.retryable:
            return False
        if error.status is not None:
            return 400 <= error.status < 500 and error.status not in RETRY_STATUSES
        return None  # no status: the cause says what went wrong
    if isinstance(error, StoreError):
        return None  # the store says why: an encoding error in it is permanent, a disk error not
    if isinstance(error, (PropagatingToolError, AbortedError, OSError)):
        return False
    if isinstance(error, (UnicodeError, RecursionError, ValueError, TypeError)):
        return True
    return None
