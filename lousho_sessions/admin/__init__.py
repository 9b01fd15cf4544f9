"""The admin command: ``python -m lousho_sessions`` (console script ``lousho``).

``main(argv)`` parses the command line and returns the exit code (see
docs/operations.md): 0 done; 1 something was found or failed (doctor's problems,
an unknown id, a busy session, a copy that does not match); 2 a usage error (bad
option, bad URL, no store); 3 the store could not be opened or failed; 130 Ctrl-C.
Every sub-command takes ``--store URL`` (default ``$LOUSHO_STORE``) and ``--json``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ..errors import LoushoError
from . import _doctor, _keys, _maintenance, _sessions, _turns
from ._context import Context
from ._output import EXIT_STORE, EXIT_USAGE, CommandError, say

__all__ = ["build_parser", "main"]

_EPILOG = """\
exit codes: 0 done; 1 found or failed (doctor's problems, unknown id, busy session,
copy mismatch); 2 usage (bad option or URL, no store); 3 store error; 130 Ctrl-C.

store URLs: memory:  file:///dir  sqlite:///rel.db  sqlite:////abs.db
  postgresql://user@host/db?schema=lousho  redis://host:6379/0?prefix=lousho
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the whole command, sub-commands included."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store",
        metavar="URL",
        help="the store (default: $LOUSHO_STORE), e.g. sqlite:///app.db",
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    agent = argparse.ArgumentParser(add_help=False)
    agent.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        help="your Agent, e.g. myapp.agents:agent, or a function returning one (given "
        "the store if it takes an argument); imported from the current directory too",
    )
    parser = argparse.ArgumentParser(
        prog="lousho",
        description="Inspect and repair the sessions, turns and approvals of a "
        "lousho_sessions store.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    try:
        code: int = args.run(ctx)
        return code
    except CommandError as exc:
        say(f"lousho {args.command}: {exc}")
        return exc.code
    except LoushoError as exc:
        say(f"lousho {args.command}: {type(exc).__name__}: {exc}")
        return EXIT_STORE
    except NotImplementedError as exc:
        say(f"lousho {args.command}: this store cannot do that: {exc}")
        return EXIT_STORE
    except KeyboardInterrupt:
        say(f"lousho {args.command}: interrupted")
        return 130
    finally:
        try:
            ctx.close()
        except LoushoError as exc:
            say(f"lousho {args.command}: closing the store: {exc}")
