"""The verdict of ``benchmarks/token_cost.py`` on its repeated timing runs (``best_of``).

The benchmark's target, our time per model call at 1,000 messages, is judged on each
configuration's lowest median across the runs, then the worst configuration; the
10-message rows and the comparison rows (the tool not declared read-only) never count.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import token_cost

CONFIGS = [
    ("anthropic", "memory", 10, True),
    ("anthropic", "memory", 1000, True),
    ("anthropic", "sqlite", 1000, True),
    ("openai", "sqlite", 1000, True),
    ("anthropic", "sqlite", 1000, False),  # comparison only
]


def test_each_configuration_counts_its_best_run_and_the_worst_configuration_decides() -> None:
    first = {
        CONFIGS[0]: (9.0, 9.0, 9.0),  # 10 messages: never counted
        CONFIGS[1]: (1.5, 1.4, 1.3),  # a slow run of this one ...
        CONFIGS[2]: (0.9, 0.8, 0.7),
        CONFIGS[3]: (0.6, 0.5, 0.4),
        CONFIGS[4]: (8.0, 8.0, 8.0),  # not read-only: never counted
    }
    second = {
        CONFIGS[0]: (9.0, 9.0, 9.0),
        CONFIGS[1]: (0.8, 0.7, 0.6),  # ... and its better run, which counts
        CONFIGS[2]: (1.2, 1.1, 1.0),
        CONFIGS[3]: (0.5, 0.45, 0.35),
        CONFIGS[4]: (8.0, 8.0, 8.0),
    }
    assert token_cost.best_of([first, second]) == (0.9, 0.8, 0.7)
    assert token_cost.best_of([first]) == (1.5, 1.4, 1.3)


@given(
    st.lists(
        st.lists(st.floats(0.01, 5.0), min_size=len(CONFIGS) * 3, max_size=len(CONFIGS) * 3),
        min_size=1,
        max_size=4,
    )
)
def test_the_verdict_is_the_max_over_counted_configurations_of_the_min_over_runs(
    values: list[list[float]],
) -> None:
    runs = [
        {c: (v[3 * i], v[3 * i + 1], v[3 * i + 2]) for i, c in enumerate(CONFIGS)} for v in values
    ]
    counted = [c for c in CONFIGS if c[2] == 1000 and c[3]]
    expected = tuple(max(min(run[c][n] for run in runs) for c in counted) for n in range(3))
    assert token_cost.best_of(runs) == pytest.approx(expected)
    # never worse than the best single run's verdict, never below any median counted
    for n in range(3):
        single = [max(run[c][n] for c in counted) for run in runs]
        lowest = min(run[c][n] for run in runs for c in counted)
        assert lowest <= token_cost.best_of(runs)[n] <= min(single)
