from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.register_assert_rewrite("lousho_sessions.testing")

from storekit import KINDS, Kit, open_kit  # noqa: E402 - after the rewrite hook


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Kit]:
    """Each store kind in turn, empty, closed after the test."""
    kit = open_kit(request.param, tmp_path / "store")
    yield kit
    kit.close()
