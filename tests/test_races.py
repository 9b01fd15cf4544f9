"""Race tests (issue 4): 8 processes resolve one approval: one winner, the tool ran once.

The slow-marked variant (``make soak``) runs 200 rounds instead of 20.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import fork_server
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import race_harness

PROCESSES = 8


@pytest.mark.parametrize("rounds", [20, pytest.param(200, marks=pytest.mark.slow)])
@pytest.mark.parametrize("kind", ["sqlite", "files"])
def test_eight_processes_resolve_one_approval(kind: str, rounds: int, tmp_path: Path) -> None:
    ctx = fork_server.CONTEXT
    barrier = ctx.Barrier(PROCESSES + 1)
    ids = ctx.Queue()
    results = ctx.Queue()
    logfile = str(tmp_path / "log.txt")
    procs = [
        ctx.Process(
            target=race_harness.racer,
            args=(kind, str(tmp_path), logfile, rounds, barrier, ids, results),
        )
        for _ in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    try:
        for round_ in range(rounds):
            approval_id = race_harness.pause(kind, str(tmp_path), logfile, round_)
            for _ in range(PROCESSES):
                ids.put(approval_id)
            barrier.wait(60)  # go
            barrier.wait(60)  # all done
            outcomes = Counter(results.get(timeout=60)[1] for _ in range(PROCESSES))
            assert outcomes == {"won": 1, "lost": PROCESSES - 1}, (round_, outcomes)
    finally:
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
    paid = Path(logfile).read_text().splitlines()
    assert sorted(int(line.split()[1]) for line in paid) == list(
        range(rounds)
    )  # each tool ran once
