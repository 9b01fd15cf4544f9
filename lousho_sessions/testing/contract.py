"""``StoreContractTests``: every test of the store contract, for pytest to collect from a subclass."""

from __future__ import annotations

from ._coverage import CoverageTests
from ._end_to_end import EndToEndTests
from ._fastpaths import FastPathTests
from ._history import HistoryTests
from ._leases import LeaseTests
from ._records import ApprovalTests, CheckpointTests
from ._sessions import SessionTests
from ._state import StateTests
from ._support import WAIT
from ._usage import UsageTests

__all__ = ["WAIT", "StoreContractTests"]


class StoreContractTests(
    SessionTests,
    UsageTests,
    LeaseTests,
    CheckpointTests,
    ApprovalTests,
    FastPathTests,
    HistoryTests,
    StateTests,
    EndToEndTests,
    CoverageTests,
):
    """The store contract as tests. Subclass it as ``Test…`` and define ``make_store``.

    ``make_store(self, tmp_path)`` returns a new, empty store (anything
    ``store_parts()`` accepts). Define ``reopen_store(self, tmp_path)`` too, returning
    the same store opened again, to test persistence and, for a store whose
    ``lock_scope`` is ``"machine"`` or ``"cluster"``, other processes: they open it
    through ``reopen_store`` in a process of their own, so the class must be defined
    at the top level of an importable module. Parts the store lacks, powers it does
    not declare (``fenced_writes``, ``prune``, revisions) and the cross-process tests of a
    ``"process"``-scoped lock are skipped, each saying why. The tests check behaviour
    and error types, never the wording of messages.

    Besides each method of the contract on its own, it calls the fast paths a turn
    takes (``load_since``, ``take_turn``, ``commit_turn``, ``save_and_delete``), rewinds and
    forks sessions (``rewind``, ``fork``), runs the public API over the store end to end (two sessions
    taking turns, a durable turn with a tool, a turn killed in another process and
    resumed, an approval), and fails naming any contract method the store overrides
    that no test of the kit exercises (``test_kit_exercises_every_override``).
    """
