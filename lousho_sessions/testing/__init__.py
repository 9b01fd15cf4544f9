"""The store conformance kit: the contract every store must keep, as tests you can run.

Five lines run it over your store (with pytest)::

    from lousho_sessions.testing import StoreContractTests

    class TestMyStore(StoreContractTests):
        def make_store(self, tmp_path):
            return MyStore()

``session_store_machine``, ``checkpoint_store_machine`` and
``approval_store_machine`` build Hypothesis state machines that run random
sequences of calls against a dict model: ``TestMine = session_store_machine(make).TestCase``.
Importing this package imports neither pytest nor Hypothesis; the machines
import Hypothesis when you build one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .contract import WAIT, StoreContractTests

if TYPE_CHECKING:
    from hypothesis.stateful import RuleBasedStateMachine

__all__ = [
    "WAIT",
    "StoreContractTests",
    "approval_store_machine",
    "checkpoint_store_machine",
    "session_store_machine",
]


def session_store_machine(factory: Callable[[Path], Any]) -> type[RuleBasedStateMachine]:
    """A state machine running the sessions part of ``factory(tmp_dir)`` against a dict model."""
    from .machines import session_machine

    return session_machine(factory)


def checkpoint_store_machine(factory: Callable[[Path], Any]) -> type[RuleBasedStateMachine]:
    """A state machine running the checkpoints part of ``factory(tmp_dir)`` against a dict model."""
    from .machines import checkpoint_machine

    return checkpoint_machine(factory)


def approval_store_machine(factory: Callable[[Path], Any]) -> type[RuleBasedStateMachine]:
    """A state machine running the approvals part of ``factory(tmp_dir)`` against a dict model."""
    from .machines import approval_machine

    return approval_machine(factory)
