"""Runs several admin command lines in one interpreter, as ``python -m lousho_sessions`` runs one.

``python tests/admin_batch.py`` reads a JSON list of argument lists on stdin and
prints a JSON list of ``[exit code, stdout, stderr]``, one per command line, each
run by ``lousho_sessions.admin.main`` with its own store, opened and closed. The
admin tests use it to keep one interpreter start per test, not per command.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

from lousho_sessions.admin import main


def run(argv: list[str]) -> list[object]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return [code, out.getvalue(), err.getvalue()]


if __name__ == "__main__":
    print(json.dumps([run(argv) for argv in json.load(sys.stdin)]))
