"""The admin command: ``python -m lousho_sessions`` (console script ``lousho``).

``main(argv)`` parses the command line and returns the exit code (see
docs/operations.md): 0 done; 1 something was found or failed (doctor's problems,
an unknown id, a busy session, a copy that does not match); 2 a usage error (bad
option, bad URL or id, an age too large, no store, an export directory missing); 3
the store could not be opened (a read-only command given a database that does not
exist) or failed; 130 interrupted. ``--store URL`` (default ``$LOUSHO_STORE``) and
``--json`` go before the sub-command or after it. Errors never show a password:
argparse's messages are redacted too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from .. import __version__
from ..errors import LoushoError, StoreError
from ..stores._secrets import redact_text
from . import _doctor, _keys, _maintenance, _sessions, _turns
from ._context import Context
from ._output import EXIT_STORE, EXIT_USAGE, CommandError, cli_hints, say

__all__ = ["build_parser", "main"]

_EPILOG = """\
exit codes: 0 done; 1 found or failed (doctor's problems, unknown id, busy session,
copy mismatch); 2 usage (bad option, URL, id or age, no store, no such export
directory); 3 store error (a read-only command on a database that does not exist);
130 interrupted.

global options (before or after the sub-command): --store URL, --json

store URLs: memory:  file:///dir  sqlite:///rel.db  sqlite:////abs.db
  postgresql://user@host/db?schema=lousho  redis://host:6379/0?prefix=lousho
"""


class _Parser(argparse.ArgumentParser):
    """argparse, whose error messages quote what was typed: with the passwords of URLs masked
    (``lousho --store URL`` misplaced used to print the URL whole)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, redact_text(f"{self.prog}: error: {message}\n"))


def _global_options(parser: argparse.ArgumentParser, default: object) -> None:
    """``--store`` and ``--json``: on the command (defaults) and on each sub-command, where
    they default to nothing so that a value given before the sub-command stays."""
    parser.add_argument(
        "--store",
        metavar="URL",
        default=default if default is argparse.SUPPRESS else None,
        help="the store (default: $LOUSHO_STORE), e.g. sqlite:///app.db",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=default if default is argparse.SUPPRESS else False,
        help="print JSON instead of a table",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the whole command, sub-commands included."""
    common = _Parser(add_help=False)
    _global_options(common, argparse.SUPPRESS)
    agent = _Parser(add_help=False)
    agent.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        help="your Agent, e.g. myapp.agents:agent, or a function returning one (given "
        "the store if it takes an argument); imported from the current directory too",
    )
    parser = _Parser(
        prog="lousho",
        description="Inspect and repair the sessions, turns and approvals of a "
        "lousho_sessions store.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _global_options(parser, None)
    parser.add_argument("--version", action="version", version=f"lousho {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _sessions.register(commands, common)
    _turns.register(commands, common, agent)
    _maintenance.register(commands, common, agent)
    _doctor.register(commands, common)
    _keys.register(commands, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    ctx = Context(args)
    name = " ".join(filter(None, (args.command, getattr(args, "action", None))))
    try:
        code: int = args.run(ctx)
        return code
    except CommandError as exc:
        say(f"lousho {name}: {cli_hints(str(exc))}")
        return exc.code
    except LoushoError as exc:
        say(f"lousho {name}: {type(exc).__name__}: {cli_hints(str(exc))}")
        # a bad id or input given on the command line is a usage error; a store that
        # answered with an error (StoreCorruptError is a ValueError too) is not
        usage = isinstance(exc, ValueError) and not isinstance(exc, StoreError)
        return EXIT_USAGE if usage else EXIT_STORE
    except NotImplementedError as exc:
        say(f"lousho {name}: this store cannot do that: {exc}")
        return EXIT_STORE
    except KeyboardInterrupt:
        say(f"lousho {name}: interrupted")
        return 130
    finally:
        try:
            ctx.close()
        except LoushoError as exc:
            say(f"lousho {name}: closing the store: {exc}")
