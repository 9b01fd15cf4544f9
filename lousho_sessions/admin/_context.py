"""What a sub-command runs with: its arguments, its output, its store, the agent it may need."""

from __future__ import annotations

import argparse
import inspect
import os
import sys
from typing import Any

from .. import _sweeper
from ..agent import Agent, create_agent
from ..errors import LoushoError
from ..stores.urls import STORE_ENV, StoreURLError, URLStore, open_store
from ._data import Parts
from ._output import EXIT_STORE, EXIT_USAGE, CommandError, Output

__all__ = ["Context", "load_object", "open_url"]


def open_url(url: str, what: str = "--store") -> URLStore:
    """``open_store(url)``, its errors as ``CommandError`` (usage for a bad URL, else store)."""
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
            self._store = open_url(url)
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
        return value

    def close(self) -> None:
        if self._agent is not None:
            self._agent.close()
        if self._store is not None:
            self._store.close()
