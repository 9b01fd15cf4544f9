"""Signal handlers read and set through the C functions ``signal`` wraps.

``signal.getsignal`` and ``signal.signal`` turn every handler into an enum and back (an
exception raised and caught for a function handler); what a turn does on each call (the
caller's-thread turn's SIGINT handler, the HTTP client's look for a timer handler) needs
only the handler itself.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

__all__ = ["getsignal", "setsignal"]

getsignal: Callable[[int], Any] = signal.getsignal
setsignal: Callable[[int, Any], Any] = signal.signal
try:
    import _signal  # type: ignore[import-not-found]

    getsignal, setsignal = _signal.getsignal, _signal.signal
except ImportError:  # pragma: no cover - a Python without the ``_signal`` module
    pass
