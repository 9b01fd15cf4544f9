"""The one runner for the Python examples of README.md and docs/*.md.

Every page is covered once, by ``test_page_runs[<page>]``, under these rules:

- **Which blocks.** Every fenced block whose info string is ``python`` (or ``py``);
  fences may be indented, as inside an admonition. Other languages (``bash``,
  ``json``, ``text``) are shown, never run.
- **How a block opts out.** A block whose first line starts with ``# doc: no-run``
  (say why after it) is compiled, so it stays valid Python, but not run. Keep them
  for what cannot run here (a broker, top-level ``await``); a page has at most
  ``MAX_NO_RUN`` of them.
- **How a page runs.** Its runnable blocks run in order, in one module namespace,
  in a fresh interpreter started with ``-W error``, whose working directory is a new
  empty temporary directory (write files there), and whose environment lacks the
  model variables (``MODEL_ENV``), so ``create_agent()`` gets the offline
  ``DemoProvider``. A page is a script a reader follows top to bottom: a later block
  may use what an earlier one defined.
- **Setup a page needs** is named in the page by an HTML comment, invisible once
  rendered: ``<!-- doc: setup NAME -->``. The names are the keys of ``SETUPS``;
  ``model-server`` starts loopback OpenAI and Anthropic servers
  (tests/provider_server.py), each answering every request with its ``text``
  fixture, and sets ``OPENAI_BASE_URL``/``ANTHROPIC_BASE_URL`` and dummy keys for
  the page.
- **Failures** print the traceback with the Markdown file's own line numbers.
"""

from __future__ import annotations

import ast
import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path

import attrs
import fork_server
import pytest
from provider_server import ProviderServer, SSEReply, sse_events

ROOT = Path(__file__).resolve().parent.parent
NO_RUN = "# doc: no-run"
MAX_NO_RUN = 3
MODEL_ENV = (
    "LOUSHO_MODEL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OLLAMA_HOST",
)
PAGE_TIMEOUT = 120  # seconds; a page is a short script
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^\s`]*)[^`]*$")
_SETUP = re.compile(r"^<!--\s*doc:\s*setup\s+(?P<name>[\w-]+)\s*-->\s*$", re.MULTILINE)

# runs in the page's interpreter: the blocks, in order, in one fresh module
_CHILD = """
import json, sys, types
page, blocks = sys.argv[1], json.load(sys.stdin)
module = types.ModuleType("doc_page")
module.__file__ = page
sys.modules[module.__name__] = module
for line, source in blocks:
    try:
        exec(compile(source, page, "exec"), module.__dict__)
    except BaseException:
        print(f"--- {page}: the python block at line {line} failed", file=sys.stderr)
        raise
"""


@attrs.frozen
class Block:
    """One fenced code block: the Markdown line its code starts on, and the code."""

    line: int
    code: str

    @property
    def runs(self) -> bool:
        first = self.code.lstrip("\n").split("\n", 1)[0].strip()
        return not first.startswith(NO_RUN)

    @property
    def padded(self) -> str:
        """The code moved down to its Markdown line, so tracebacks name that line."""
        return "\n" * (self.line - 1) + self.code


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


@contextmanager
def model_server() -> Iterator[dict[str, str]]:
    """Loopback OpenAI and Anthropic servers that answer every request with their text reply."""
    with ProviderServer() as openai, ProviderServer() as anthropic:
        openai.reply(*[SSEReply(sse_events("openai", "text")) for _ in range(50)])
        anthropic.reply(*[SSEReply(sse_events("anthropic", "text")) for _ in range(50)])
        yield {
            "OPENAI_BASE_URL": openai.url + "/v1",
            "OPENAI_API_KEY": "sk-doc-test",
            "ANTHROPIC_BASE_URL": anthropic.url,
            "ANTHROPIC_API_KEY": "sk-ant-doc-test",
        }


SETUPS: dict[str, Callable[[], AbstractContextManager[dict[str, str]]]] = {
    "model-server": model_server,
}


def setups_of(text: str) -> list[str]:
    return [match["name"] for match in _SETUP.finditer(text)]


def test_the_extractor_finds_fenced_python_blocks() -> None:
    text = "\n".join(
        [
            "# Title",
            "<!-- doc: setup model-server -->",
            "```python",
            "x = 1",
            "```",
            "```bash",
            "make test",
            "```",
            '!!! note "indented"',
            "    ```python",
            "    # doc: no-run (needs a broker)",
            "    y = 2",
            "    ```",
        ]
    )
    blocks = python_blocks(text)
    assert [(b.line, b.code, b.runs) for b in blocks] == [
        (4, "x = 1", True),
        (11, "# doc: no-run (needs a broker)\ny = 2", False),
    ]
    assert setups_of(text) == ["model-server"]


def test_the_readme_and_the_docs_have_python_examples() -> None:
    assert python_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert (ROOT / "docs" / "index.md").is_file()


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_page_runs(path: Path, tmp_path: Path) -> None:
    relative = str(path.relative_to(ROOT))
    text = path.read_text(encoding="utf-8")
    blocks = python_blocks(text)
    skipped = [block for block in blocks if not block.runs]
    assert len(skipped) <= MAX_NO_RUN, f"{relative}: more than {MAX_NO_RUN} no-run blocks"
    for block in skipped:
        # compiled all the same, so a shown example stays valid Python
        compile(block.padded, str(path), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    runnable = [(block.line, block.padded) for block in blocks if block.runs]
    if not runnable:
        return
    env = {name: value for name, value in os.environ.items() if name not in MODEL_ENV}
    with ExitStack() as stack:
        for name in setups_of(text):
            assert name in SETUPS, f"{relative}: unknown setup {name!r}; known: {sorted(SETUPS)}"
            env.update(stack.enter_context(SETUPS[name]()))
        done = fork_server.run(
            ["-W", "error", "-c", _CHILD, str(path)],
            input=json.dumps(runnable),
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=PAGE_TIMEOUT,
        )
    if done.returncode != 0:
        pytest.fail(f"{relative} failed:\n{done.stderr[-6000:]}", pytrace=False)
