"""What a sub-command runs with: its arguments, its output, its store, the agent it may need."""

from __future__ import annotations

import argparse
import inspect
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from ..agent import Agent, create_agent
from ..errors import LoushoError
from ..stores.urls import STORE_ENV, StoreURLError, URLStore, open_store, redacted_url
from . import _sweeper
from ._data import Parts
from ._output import EXIT_STORE, EXIT_USAGE, CommandError, Output, say

__all__ = ["Context", "load_object", "open_url"]


def _missing_local_store(url: str) -> str | None:
    """What is missing when ``url`` names an SQLite database or a file store directory
    that does not exist (opening it would create it); ``None`` when it exists or is not
    local."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None  # open_store says what is wrong with it
    scheme = parts.scheme.lower()
    raw = unquote(parts.path)
    if scheme == "sqlite" and raw.startswith("/") and raw not in ("/", "/:memory:"):
        path = Path(raw[1:])
        if path.is_file():
            return None
        missing = f"no SQLite database {str(path)!r}"
        if not path.is_absolute() and Path(raw).is_file():  # three slashes meant four
            missing += (
                f"; sqlite:/// takes a path relative to the current directory: for the "
                f"database at {raw} write sqlite:///{raw}"
            )
        return missing
    if scheme == "file" and raw:
        path = Path(raw)
        return None if path.is_dir() else f"no file store directory {str(path)!r}"
    return None


def open_url(url: str, what: str = "--store", *, must_exist: bool = False) -> URLStore:
    """``open_store(url)``, its errors as ``CommandError`` (usage for a bad URL, else store).

    ``must_exist``: a read-only command never creates a store: an SQLite file or a
    file store directory that is not there is a store error (a mistyped path)."""
    if must_exist:
        missing = _missing_local_store(url)
        if missing is not None:
            raise CommandError(
                f"{what}: {missing} (from {redacted_url(url)!r}): this command only reads, "
                "and creates no store; check the path",
                EXIT_STORE,
            )
    try:
        return open_store(url)
    except StoreURLError as exc:
        raise CommandError(f"{what}: {exc}", EXIT_USAGE) from exc
    except LoushoError as exc:
        raise CommandError(f"{what}: {exc}", EXIT_STORE) from exc


def load_object(spec: str) -> Any:
    """The object ``"package.module:attr"`` names, imported from the current directory too."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: the current project is importable
    try:
        return _sweeper.load_object(spec)
    except LoushoError as exc:
        raise CommandError(f"--agent: {exc}", EXIT_USAGE) from exc


def _takes_an_argument(fn: Any) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters
    )


def _other_store(agents: Any, given: URLStore) -> str | None:
    """How to name the agent's store when it is not ``given`` (``None`` when it is)."""
    if agents is None or agents is given or getattr(agents, "backend", None) is given.backend:
        return None
    if given.backend is not None and any(
        getattr(agents, part, None) is getattr(given.backend, part, object())
        for part in ("sessions", "checkpoints")
    ):
        return None
    url = getattr(agents, "url", None)
    if isinstance(url, str) and url == given.url:
        return None  # the same store opened twice
    return url if isinstance(url, str) and url else repr(agents)


class Context:
    """A sub-command's arguments, ``Output`` and store (opened on first use, closed by ``close``)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Output(as_json=bool(getattr(args, "json", False)))
        self._store: URLStore | None = None
        self._parts: Parts | None = None
        self._agent: Agent | None = None

    @property
    def store(self) -> URLStore:
        if self._store is None:
            url = getattr(self.args, "store", None) or os.environ.get(STORE_ENV, "").strip()
            if not url:
                raise CommandError(
                    f"no store: give --store URL or set {STORE_ENV} "
                    "(e.g. sqlite:///app.db, postgresql://host/db, redis://host:6379/0)",
                    EXIT_USAGE,
                )
            read_only = bool(getattr(self.args, "read_only", False)) or bool(
                getattr(self.args, "dry_run", False)
            )
            self._store = open_url(url, must_exist=read_only)
        return self._store

    @property
    def parts(self) -> Parts:
        if self._parts is None:
            self._parts = Parts(self.store)
        return self._parts

    def agent(self, *, required: bool) -> Agent:
        """The ``--agent`` object: an ``Agent``, or a function returning one, called with the
        store when it takes an argument (else with none).

        Without ``--agent``: an offline agent on the store when not ``required`` (enough to
        drop a turn), else a usage error.
        """
        if self._agent is not None:
            return self._agent
        spec = getattr(self.args, "agent", None)
        if spec is None:
            if required:
                raise CommandError(
                    "this command runs turns: give --agent package.module:attribute naming "
                    "your Agent (or a function taking the store and returning one)",
                    EXIT_USAGE,
                )
            self._agent = create_agent(store=self.store, model="demo")
            return self._agent
        value = load_object(spec)
        if not isinstance(value, Agent) and callable(value):
            value = value(self.store) if _takes_an_argument(value) else value()
        if not isinstance(value, Agent):
            raise CommandError(
                f"--agent {spec!r} is a {type(value).__name__}, not an Agent "
                "(or a function returning one)",
                EXIT_USAGE,
            )
        self._agent = value
        other = _other_store(value.store, self.store)
        if other is not None:
            say(
                f"lousho: note: --agent {spec!r} has a store of its own ({other}), not "
                f"--store ({self.store.url}): the turns are read from and written to "
                "--store; give --agent a function taking the store to use one store only"
            )
        return value

    def close(self) -> None:
        if self._agent is not None:
            self._agent.close()
        if self._store is not None:
            self._store.close()
