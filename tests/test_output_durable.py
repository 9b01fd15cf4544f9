"""Typed output survives a crash: a real process dies mid-turn, a new one resumes the
turn and gets the parsed output (it is read from the final answer, which the resumed
turn makes; the output type comes from the agent or from ``resume()``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import fork_server
import pytest
from output_cases import GOOD_BILL

CHILD = str(Path(__file__).with_name("output_child.py"))


def child(*args: str) -> subprocess.CompletedProcess[str]:
    return fork_server.run([CHILD, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("how", ["agent", "call"])
@pytest.mark.parametrize("where", ["final", "repair"])
def test_the_output_survives_a_crash_and_resume(where: str, how: str, tmp_path: Path) -> None:
    logfile = str(tmp_path / "log.txt")
    first = child("turn", str(tmp_path), logfile, where)
    assert first.returncode == -9, first.stderr
    second = child("resume", str(tmp_path), logfile, how)
    assert second.returncode == 0, second.stderr
    outcome = json.loads(second.stdout)
    assert (
        outcome["output"]
        == "Bill(items=[Item(name='a', price=1.0, note=None, qty=1)], total=1.0, paid=False)"
    )
    assert outcome["text"] == json.dumps(GOOD_BILL)
    # the tool ran once: its recorded result was not run again; the answer was made anew
    lines = Path(logfile).read_text().splitlines()
    assert lines.count("lookup turn") == 1 and not any(x.startswith("lookup resume") for x in lines)
    assert "model-tool resume 0" not in lines
    # the transcript holds the turn once, ending with the answer that fits
    transcript = outcome["transcript"]
    assert [t[0] for t in transcript] == ["user", "assistant", "tool", "assistant"]
    assert transcript[-1][1] == json.dumps(GOOD_BILL)[:40]
