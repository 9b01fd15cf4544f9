"""The kit's session state machine catches every rewind, fork and state mutant of the memory store.

The machine's rules for ``rewind``, ``fork`` and a commit with state (``testing.machines``)
are checked like the kit's tests in ``test_kit_mutants.py``: the memory store with one faulty
method (``history_mutants``, ``state_mutants`` but the prune's: the machine prunes nothing)
must fail a run of the machine, and the right store must pass it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from history_mutants import HISTORY_FAULTS
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test
from state_mutants import STATE_FAULTS
from test_kit_mutants import Mutant, mutate

from lousho_sessions import memory_store
from lousho_sessions.testing import session_store_machine
from lousho_sessions.testing.machines import SETTINGS

#: Enough runs to meet each fault in practice (the rarest is met in ~65% of 20 runs, so missed
#: in 200 about once in 30,000); no shrinking (only "it fails" matters), no example database
#: (a failure must be found afresh every time).
FIND = settings(SETTINGS, max_examples=200, phases=[Phase.generate], database=None)


def run_machine(mutant: Mutant | None, runs: settings = FIND) -> None:
    def factory(path: Path) -> Any:
        made = memory_store()
        return made if mutant is None else mutate(made, mutant)

    run_state_machine_as_test(session_store_machine(factory), settings=runs)


def test_the_machine_passes_the_right_store() -> None:
    run_machine(None, SETTINGS)


@pytest.mark.parametrize(
    "mutant",
    [
        Mutant(fault, "sessions", method, make)
        for fault, method, make, _ in [*HISTORY_FAULTS, *STATE_FAULTS]
        if method != "prune"
    ],
    ids=lambda m: m.name,
)
def test_the_machine_catches_a_faulty_history_verb(mutant: Mutant) -> None:
    with pytest.raises(Exception):  # noqa: B017 -- a failed check, or a wrong error let through
        run_machine(mutant)
