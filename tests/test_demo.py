"""``make demo`` runs offline: no key, no network, exit 0, and it shows what it claims."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL_ENV = ("LOUSHO_MODEL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL")


def run_demo(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in MODEL_ENV}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "lousho_sessions.demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_demo_runs_offline_and_shows_each_section(tmp_path: Path) -> None:
    proc = run_demo(tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "model: demo (offline DemoProvider)" in out
    for title in (
        "== 1. A session remembers across turns ==",
        "== 2. A second agent instance opens the same session id from the shared store ==",
        "== 3. A streamed turn, printed as text deltas arrive ==",
        "== 4. A tool call ==",
        "== 5. A tool that needs approval ==",
    ):
        assert title in out
    remembered, second_agent, streamed, tool_call, approval = (
        out.split("== 1.")[1].split("== 2.")[0],
        out.split("== 2.")[1].split("== 3.")[0],
        out.split("== 3.")[1].split("== 4.")[0],
        out.split("== 4.")[1].split("== 5.")[0],
        out.split("== 5.")[1],
    )
    assert "assistant: Your name is Ali." in remembered
    assert "loaded 4 messages" in second_agent
    assert "assistant: Your name is Ali." in second_agent
    assert "Your |name |is |Ali.|" in streamed
    assert "tool call: get_weather({'city': 'Paris'})" in tool_call
    assert "tool result: Sunny and 22 C in Paris" in tool_call
    assert "finish_reason='awaiting-approval'" in approval
    assert "assistant: send_invoice says: invoice sent to ACME Corp" in approval
    assert proc.stderr == ""
