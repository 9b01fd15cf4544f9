"""Every Python block of docs/stores.md runs as it is."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).parent.parent / "docs" / "stores.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_doc_has_examples() -> None:
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("n", range(len(BLOCKS)))
def test_block_runs(n: int, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", BLOCKS[n]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_the_example_store_passes_the_conformance_kit(tmp_path: Path) -> None:
    """The doc's custom store and its five-line kit usage, run by pytest as a user would."""
    (store,) = [b for b in BLOCKS if "class JsonDictSessionStore(BaseSessionStore)" in b]
    (kit,) = [b for b in BLOCKS if "class TestJsonDictStore(StoreContractTests)" in b]
    (tmp_path / "test_example_store.py").write_text(store + "\n\n" + kit)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error", "-rs"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = result.stdout.strip().splitlines()[-1]
    assert "passed" in summary and "failed" not in summary, summary
