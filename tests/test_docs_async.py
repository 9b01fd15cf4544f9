"""Every Python snippet of docs/async.md and docs/integrations.md runs.

The blocks of one page run in order in one namespace (a fresh module), each page
in a fresh interpreter, so a page is a script a reader can follow top to bottom.
A block whose first line is ``# doc: no-run`` is shown, not run. Warnings are
errors, as in the rest of the suite.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).parent.parent / "docs"
PAGES = ["async.md", "integrations.md"]
MODEL_ENV = ("LOUSHO_MODEL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL")
FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)

RUNNER = """
import json, sys, types
blocks = json.load(sys.stdin)
module = types.ModuleType("doc_page")
sys.modules["doc_page"] = module
for line, code in blocks:
    try:
        exec(compile(code, f"{sys.argv[1]}:{line}", "exec"), module.__dict__)
    except BaseException:
        print(f"--- the block at {sys.argv[1]}:{line} failed", file=sys.stderr)
        raise
"""


def blocks(page: str) -> list[tuple[int, str]]:
    text = (DOCS / page).read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        code = match.group(1)
        if code.lstrip("\n").split("\n", 1)[0].strip() == "# doc: no-run":
            continue
        line = text.count("\n", 0, match.start(1)) + 1
        # offset the code so tracebacks point at the page's own line numbers
        found.append((line, "\n" * (line - 1) + code))
    return found


@pytest.mark.parametrize("page", PAGES)
def test_every_snippet_runs(page: str, tmp_path: Path) -> None:
    runnable = blocks(page)
    assert runnable, f"{page} has no runnable python block"
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", RUNNER, f"docs/{page}"],
        input=json.dumps(runnable),
        capture_output=True,
        text=True,
        cwd=tmp_path,  # snippets that write files write them here
        env={k: v for k, v in os.environ.items() if k not in MODEL_ENV},  # the offline demo model
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]


def test_no_run_blocks_are_few() -> None:
    for page in PAGES:
        text = (DOCS / page).read_text(encoding="utf-8")
        total = len(FENCE.findall(text))
        assert len(blocks(page)) >= total - 3, f"{page}: most snippets must run"
