"""What every sub-command of the admin command shares: output, exit codes, progress, ages."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, TextIO

__all__ = [
    "EXIT_FOUND",
    "EXIT_OK",
    "EXIT_STORE",
    "EXIT_USAGE",
    "MAX_AGE",
    "CommandError",
    "Output",
    "Progress",
    "cli_hints",
    "iso",
    "parse_age",
    "say",
    "short",
]

#: Done, nothing to report.
EXIT_OK = 0
#: Done, and something was found or failed: doctor's problems, a missing id, a busy
#: session, a migration whose copy does not match.
EXIT_FOUND = 1
#: The command line was wrong: unknown option, bad URL, no store given.
EXIT_USAGE = 2
#: The store could not be opened or answered with an error.
EXIT_STORE = 3

#: The largest age taken (1000 years): a larger one overflows dates and durations.
MAX_AGE = 1000 * 365.25 * 86400

_AGE = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class CommandError(Exception):
    """Stops a sub-command with a message on stderr and an exit code."""

    def __init__(self, message: str, code: int = EXIT_FOUND) -> None:
        super().__init__(message)
        self.code = code


def parse_age(text: str) -> float:
    """``"90"`` (seconds), ``"30m"``, ``"12h"``, ``"7d"``, ``"2w"`` or ``"1h30m"`` as seconds."""
    value = text.strip().lower()
    try:
        seconds = float(value)
    except ValueError:
        pieces = _AGE.findall(value)
        if not pieces or "".join(n + u for n, u in pieces) != value:
            raise CommandError(
                f"invalid age {text!r}: write seconds (3600) or a number with s, m, h, d or w "
                "(30m, 12h, 7d, 1h30m)",
                EXIT_USAGE,
            ) from None
        seconds = sum(float(n) * _UNITS[u] for n, u in pieces)
    if not 0 <= seconds < float("inf"):
        raise CommandError(f"invalid age {text!r}: it must be finite and not negative", EXIT_USAGE)
    if seconds > MAX_AGE:
        raise CommandError(
            f"invalid age {text!r}: at most 1000 years (52000w), a larger one overflows dates",
            EXIT_USAGE,
        )
    return seconds


#: What the library's errors advise in Python, and the command that does it.
_HINTS = (
    (
        re.compile(r"agent\.approvals\.resolve\(\)"),
        "`lousho approvals resolve APPROVAL_ID --approve` (or --deny)",
    ),
    (re.compile(r"(?:call )?discard_pending\(\)"), "`lousho turns discard TURN_ID`"),
    (re.compile(r"\bresume\(\)"), "`lousho turns resume TURN_ID --agent MODULE:ATTR`"),
    (re.compile(r"recovery\.abandoned_turns"), "`lousho turns list --status abandoned`"),
    (
        re.compile(r"make the agent with create_agent\(store=store\)"),
        "give --agent a function taking the store (it is called with --store's)",
    ),
)


def cli_hints(text: str) -> str:
    """``text`` (an error's message) with its advice in Python calls (``discard_pending()``)
    replaced by the ``lousho`` commands that do the same."""
    for pattern, command in _HINTS:
        text = pattern.sub(command, text)
    return text


def say(text: str) -> None:
    """A line for the operator on stderr (messages, never results: those go to stdout)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def iso(epoch: float | None) -> str | None:
    """Seconds since the epoch as ISO 8601 in UTC (to the second), or ``None``."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")


def short(text: object, width: int = 60) -> str:
    """``text`` on one line, cut to ``width`` characters."""
    one = " ".join(str("" if text is None else text).split())
    return one if len(one) <= width else one[: width - 1] + "…"


class Output:
    """Writes a command's result: one JSON document with ``--json``, else a table or lines."""

    def __init__(self, *, as_json: bool, stdout: TextIO | None = None) -> None:
        self.as_json = as_json
        self.stdout = stdout or sys.stdout

    def json(self, value: Any) -> None:
        self.stdout.write(json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")

    def line(self, text: str = "") -> None:
        self.stdout.write(text + "\n")

    def table(self, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> None:
        """``rows`` as aligned columns under upper-case headers; ``(none)`` when empty."""
        if not rows:
            self.line("(none)")
            return
        last = len(columns) - 1  # the last column is not cut: nothing comes after it
        cells = [[_cell(row.get(c), i == last) for i, c in enumerate(columns)] for row in rows]
        widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
        header = "  ".join(
            c.upper().replace("_", " ").ljust(w) for c, w in zip(columns, widths, strict=True)
        )
        self.line(header.rstrip())
        for r in cells:
            self.line("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())

    def emit(self, value: Any, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> None:
        """``value`` as JSON, or ``rows`` as a table."""
        if self.as_json:
            self.json(value)
        else:
            self.table(rows, columns)

    def fields(self, pairs: Sequence[tuple[str, Any]]) -> None:
        """``name: value`` lines, names aligned."""
        width = max((len(k) for k, _ in pairs), default=0)
        for key, value in pairs:
            self.line(f"{key.ljust(width)}  {_cell(value)}")


def _cell(value: Any, whole: bool = True) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return short(value, 10_000 if whole else 60)


class Progress:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal.

    ``advance()`` per item; ``close()`` clears the line. Redrawn at most once per
    percent, so a million items cost a hundred writes.
    """

    def __init__(self, label: str, total: int, *, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = _is_terminal(self.stream) and total > 0
        self.label = label
        self.total = total
        self.done = 0
        self._drawn = -1

    def advance(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        percent = min(100, self.done * 100 // self.total)
        if percent != self._drawn:
            self._drawn = percent
            filled = percent * 30 // 100
            bar = "#" * filled + "." * (30 - filled)
            self.stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total}")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._drawn >= 0:
            self.stream.write("\r\x1b[K")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
