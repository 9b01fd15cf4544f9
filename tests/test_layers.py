"""The layering of the package (docs/architecture.md): who may import whom.

Each rule names a group of modules and the modules it must never import, read from the
source with ``ast`` (imports inside functions and under ``TYPE_CHECKING`` count too: a
rule is about the design, not about what happens to run at import time).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "lousho_sessions"

#: The model: plain data, importing nothing but itself.
MODEL = {
    "errors",
    "messages",
    "events",
    "results",
    "run",
    "inputs",
    "abort",
    "pricing",
    "_random",
    "_signals",
}
#: The engine: one turn and how it is settled (the sub-package ``engine/``).
ENGINE = {"engine"}
#: The threads an agent owns (``runtime/``).
RUNTIME = {"runtime"}
#: ``@tool``, schemas and argument checks (``tools/``).
TOOLS = {"tools"}
#: Spans, metrics and the trace context (``telemetry/``).
TELEMETRY = {"telemetry"}
#: The face users call, with its private helpers.
FACE = {
    "agent",
    "session",
    "aio",
    "approvals",
    "recovery",
    "celery",
    "admin",
    "demo",
    "_recover",
    "_session_history",
    "_session_state",
}
#: Every flat private module sits in a layer; the rest of the engine is in ``engine/``.
FLAT_PRIVATE = {
    "_kept_json",
    "_message_codec",
    "_random",
    "_signals",
    "_recover",
    "_session_history",
    "_session_state",
}


def module_name(path: Path) -> str:
    """``stores._commit`` for ``lousho_sessions/stores/_commit.py``."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(p for p in parts if p != "__init__") or "__init__"


def imports_of(path: Path) -> set[str]:
    """The package's own modules ``path`` imports, as dotted names relative to the package."""
    return imports_in(path.read_text(), module_name(path), is_package=path.name == "__init__.py")


def imports_in(source: str, name: str, *, is_package: bool = False) -> set[str]:
    """The package's own modules ``source`` (module ``name``) imports."""
    found: set[str] = set()
    here = name.split(".")
    package = here if is_package else here[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                target = [*base, *(node.module.split(".") if node.module else [])]
            elif node.module and node.module.startswith("lousho_sessions"):
                target = node.module.split(".")[1:]
            else:
                continue
            found.add(".".join(target))
            for alias in node.names:  # ``from . import serde`` imports a module
                found.add(".".join([*target, alias.name]))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("lousho_sessions."):
                    found.add(alias.name.split(".", 1)[1])
    return found


def top(name: str) -> str:
    return name.split(".")[0]


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def broken(group: set[str], forbidden: set[str]) -> list[str]:
    """``"a imports b"`` for each module of ``group`` importing one of ``forbidden``."""
    found = []
    for name, path in sorted(MODULES.items()):
        if top(name) not in group:
            continue
        for imported in sorted(imports_of(path)):
            if top(imported) in forbidden and top(imported) != top(name):
                found.append(f"{name} imports {imported}")
    return found


@pytest.mark.parametrize(
    ("group", "forbidden", "rule"),
    [
        (
            {"stores"},
            ENGINE | RUNTIME | TOOLS | TELEMETRY | FACE | {"providers"},
            "stores never import the engine",
        ),
        (ENGINE, FACE, "the engine never imports the face"),
        (RUNTIME, ENGINE | TOOLS | FACE, "the runtime never imports the engine"),
        (TOOLS, ENGINE | FACE | {"stores"}, "tools never import the engine or stores"),
        (TELEMETRY, ENGINE | RUNTIME | FACE | {"stores"}, "telemetry imports no engine"),
        (
            {"providers"},
            ENGINE | RUNTIME | FACE | {"stores"},
            "providers never import engine or stores",
        ),
        (MODEL, ENGINE | FACE | {"stores", "providers", "serde"}, "the model imports no layer"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_layering(group: set[str], forbidden: set[str], rule: str) -> None:
    assert broken(group, forbidden) == [], rule


def test_the_private_modules_live_in_their_layers() -> None:
    """A new private module goes into the sub-package of its layer, not beside the face."""
    flat = {name for name in MODULES if "." not in name and name.startswith("_")}
    assert flat - {"__init__", "__main__"} == FLAT_PRIVATE


def test_the_reader_sees_every_form_of_import() -> None:
    """Relative, absolute and ``from . import`` imports are all found (else a rule could pass anything)."""
    source = (
        "from .._turn import Turn\nfrom ..session import Session\n"
        "import lousho_sessions.agent\nfrom .. import recovery\nfrom . import _commit\n"
        "import os\n"
    )
    found = {top(name) for name in imports_in(source, "stores.probe")}
    assert {"_turn", "session", "agent", "recovery", "stores"} <= found
    assert "os" not in found


#: The modules that make a ``Session`` (``session``) or are part of it (its mixins), and the
#: async shell that awaits its calls: the only ones that may use what a Session keeps private.
SESSION_SHELL = {"session", "_session_history", "_session_state", "aio"}


def session_privates() -> set[str]:
    """The private names ``Session`` defines: its ``_methods`` and ``self._attributes``."""
    names: set[str] = set()
    for module in ("session", "_session_history", "_session_state"):
        for node in ast.walk(ast.parse(MODULES[module].read_text())):
            if isinstance(node, ast.ClassDef) and node.name in {
                "Session",
                "HistoryMixin",
                "StateMixin",
            }:
                for item in ast.walk(node):
                    if isinstance(item, ast.FunctionDef):
                        names.add(item.name)
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        names.add(item.target.id)
                    elif isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store):
                        names.add(item.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def private_uses(source: str, privates: set[str]) -> list[str]:
    """``obj._name`` in ``source`` for each ``_name`` of ``privates`` (not on ``self``)."""
    return sorted(
        f"line {node.lineno}: .{node.attr}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr in privates
        and not (isinstance(node.value, ast.Name) and node.value.id == "self")
    )


def test_no_module_outside_the_session_uses_its_privates() -> None:
    """Recovery, the agent, approvals, admin and the engine reach a session through its
    core (``SessionCore``), never through what ``Session`` keeps private."""
    privates = session_privates()
    assert {"_core", "_send_future", "_run_job"} <= privates  # the reader sees them
    found = {
        name: uses
        for name, path in sorted(MODULES.items())
        if top(name) not in SESSION_SHELL and (uses := private_uses(path.read_text(), privates))
    }
    assert found == {}


def test_the_privates_reader_finds_a_use() -> None:
    """A module reaching into a session is caught (else the rule above could pass anything)."""
    source = "def f(session):\n    return session._core.transcript, self._core\n"
    assert private_uses(source, {"_core"}) == ["line 2: ._core"]
