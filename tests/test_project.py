"""Project configuration: each tool is configured in one file only."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_each_tool_is_configured_once(pytestconfig: pytest.Config) -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    setup_cfg = configparser.ConfigParser()
    setup_cfg.read(ROOT / "setup.cfg", encoding="utf-8")
    # pyproject.toml: packaging, ruff, mypy; setup.cfg: how tests run, coverage
    assert set(re.findall(r"^\[+tool\.(\w+)", pyproject, re.MULTILINE)) == {
        "setuptools",
        "mypy",
        "ruff",
    }
    assert set(setup_cfg.sections()) == {"tool:pytest", "coverage:run", "coverage:report"}
    assert pytestconfig.inipath == ROOT / "setup.cfg"
