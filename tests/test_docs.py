"""Every ```python block in README.md and docs/*.md runs, offline, as written.

The blocks of one file run in order in one fresh module namespace, in a
temporary working directory, with the model environment variables removed (so
``create_agent()`` uses the offline ``DemoProvider``). A block whose first line
is ``# doc: no-run`` is skipped. Line numbers in a failure's traceback are the
Markdown file's own lines.
"""

from __future__ import annotations

import re
import sys
import traceback
import types
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parent.parent
NO_RUN = "# doc: no-run"
MODEL_ENV = ("LOUSHO_MODEL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL")
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^\s`]*)[^`]*$")


@attrs.frozen
class Block:
    """One fenced code block: the Markdown line its code starts on, and the code."""

    line: int
    code: str

    @property
    def runs(self) -> bool:
        first = self.code.lstrip("\n").split("\n", 1)[0].strip()
        return first != NO_RUN


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def python_blocks(text: str) -> list[Block]:
    """The ```python blocks of a Markdown text (fences may be indented, e.g. in admonitions)."""
    blocks: list[Block] = []
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        start = index + 1
        end = start
        while end < len(lines):
            closing = _FENCE.match(lines[end])
            if (
                closing is not None
                and closing["fence"].startswith(fence)
                and not closing["info"]
                and len(closing["indent"]) <= len(indent)
            ):
                break
            end += 1
        if opening["info"].lower() in ("python", "py"):
            body = [
                line[len(indent) :] if line.startswith(indent) else line
                for line in lines[start:end]
            ]
            blocks.append(Block(start + 1, "\n".join(body)))
        index = end + 1
    return blocks


def test_the_extractor_finds_fenced_python_blocks() -> None:
    text = "\n".join(
        [
            "# Title",
            "```python",
            "x = 1",
            "```",
            "```bash",
            "make test",
            "```",
            '!!! note "indented"',
            "    ```python",
            "    # doc: no-run",
            "    y = 2",
            "    ```",
        ]
    )
    blocks = python_blocks(text)
    assert [(b.line, b.code, b.runs) for b in blocks] == [
        (3, "x = 1", True),
        (10, "# doc: no-run\ny = 2", False),
    ]


def test_the_readme_and_the_docs_have_python_examples() -> None:
    assert python_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert (ROOT / "docs" / "index.md").is_file()


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_doc_examples_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in MODEL_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    relative = path.relative_to(ROOT)
    module = types.ModuleType("doc_example_" + re.sub(r"\W", "_", path.stem))
    module.__file__ = str(path)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    for block in python_blocks(path.read_text(encoding="utf-8")):
        if not block.runs:
            continue
        # pad so that tracebacks give the Markdown file's line numbers
        source = "\n" * (block.line - 1) + block.code
        failure: str | None = None
        try:
            exec(compile(source, str(path), "exec"), module.__dict__)
        except Exception as exc:
            failure = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        if failure is not None:
            pytest.fail(
                f"{relative}: the python block at line {block.line} failed:\n{failure}",
                pytrace=False,
            )
