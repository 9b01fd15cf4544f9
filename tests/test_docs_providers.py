"""The Python blocks of docs/providers.md run (those marked ``# doc: no-run`` only compile)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "providers.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(encoding="utf-8"), re.M | re.S)


def test_the_page_has_runnable_and_network_blocks() -> None:
    no_run = [b for b in BLOCKS if b.startswith("# doc: no-run")]
    assert no_run and len(no_run) < len(BLOCKS)


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_block(number: int) -> None:
    code = BLOCKS[number]
    compiled = compile(code, f"{PAGE.name}[block {number}]", "exec")
    if code.startswith("# doc: no-run"):
        return  # needs a network and a key
    exec(compiled, {"__name__": f"doc_block_{number}"})
