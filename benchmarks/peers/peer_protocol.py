"""The line protocol between a benchmark and its peer subprocess (run by the peers' venv).

The benchmark starts ``<peers python> benchmarks/peers/<x>_peers.py <url>`` and
writes one JSON request per line on its stdin; the peer answers each with one
JSON line on stdout:

- ``{"op": "seed", "peer": P, "length": N}``: give peer ``P`` a conversation of
  ``N`` messages through its own API, in one call where it has one; answers
  ``{"ok": true, "seconds": s}``.
- ``{"op": "turns", "peer": P, "length": N, "n": k}``: ``k`` turns on that
  conversation; answers ``{"us": [µs per turn, ...]}``.
- ``{"op": "versions"}``: ``{"versions": {package: version}}``.
- ``{"op": "close"}``: delete everything the peers wrote (schema, keys) and exit.

An error answers ``{"error": "..."}`` and the peer goes on. Only the standard
library here: the peer's end runs under the peers' interpreter, the benchmark's
end (``PeerProcess``, at the bottom) under the project's.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol


class Peer(Protocol):
    """One peer: seeds a conversation and times turns on it."""

    def seed(self, length: int) -> None: ...

    def turns(self, length: int, n: int) -> list[float]:
        """``n`` turns on the conversation seeded with ``length`` messages; µs each."""
        ...

    def close(self) -> None:
        """Delete what this peer wrote."""
        ...


def timed(turn: Callable[[], object], n: int) -> list[float]:
    """µs of each of ``n`` calls of ``turn``."""
    out = []
    for _ in range(n):
        start = time.perf_counter_ns()
        turn()
        out.append((time.perf_counter_ns() - start) / 1_000)
    return out


async def timed_async(turn: Callable[[], Awaitable[object]], n: int) -> list[float]:
    """µs of each of ``n`` awaited calls of ``turn`` (one event loop for all)."""
    out = []
    for _ in range(n):
        start = time.perf_counter_ns()
        await turn()
        out.append((time.perf_counter_ns() - start) / 1_000)
    return out


USER_TEXT = "What about region {n}?"
REPLY_TEXT = "Revenue grew in most regions while costs stayed flat. " * 5


def history_texts(length: int) -> list[tuple[str, str]]:
    """``(role, text)`` of a seeded conversation: the same texts as the project's side."""
    out: list[tuple[str, str]] = []
    for n in range(length // 2):
        out.append(("user", f"Question {n}: what changed in the report for region {n % 7}?"))
        out.append(("assistant", REPLY_TEXT))
    return out


def versions(packages: list[str]) -> dict[str, str]:
    found = {}
    for name in packages:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def serve(peers: dict[str, Peer], packages: list[str]) -> None:
    """Answer requests from stdin until ``close`` or the end of input; then close every peer."""
    try:
        for line in sys.stdin:
            request: dict[str, Any] = json.loads(line)
            op = request.get("op")
            if op == "close":
                break
            try:
                if op == "versions":
                    answer: dict[str, Any] = {"versions": versions(packages)}
                elif op == "seed":
                    start = time.perf_counter()
                    peers[request["peer"]].seed(int(request["length"]))
                    answer = {"ok": True, "seconds": time.perf_counter() - start}
                elif op == "turns":
                    peer = peers[request["peer"]]
                    answer = {"us": peer.turns(int(request["length"]), int(request["n"]))}
                else:
                    answer = {"error": f"unknown op {op!r}"}
            except Exception as exc:
                traceback.print_exc(file=sys.stderr)
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(answer), flush=True)
    finally:
        for peer in peers.values():
            try:
                peer.close()
            except Exception:
                traceback.print_exc(file=sys.stderr)
        print(json.dumps({"ok": True, "closed": True}), flush=True)


# -- the benchmark's end (the project's interpreter) ---------------------------------------

PEERS_DIR = Path(__file__).resolve().parent
ROOT = PEERS_DIR.parent.parent
SETUP = (
    "To measure the peers, run `make peers` (creates .peers-venv) or set LOUSHO_PEERS_PYTHON "
    f"to a python that has the packages of {PEERS_DIR.relative_to(ROOT)}/requirements.txt."
)


def peers_python() -> str | None:
    """``$LOUSHO_PEERS_PYTHON``, else ``.peers-venv/bin/python`` if it exists, else ``None``."""
    chosen = os.environ.get("LOUSHO_PEERS_PYTHON")
    if chosen:
        return chosen
    default = ROOT / ".peers-venv" / "bin" / "python"
    return str(default) if default.exists() else None


class PeerError(Exception):
    """The peer process failed or answered with an error."""


class PeerProcess:
    """A peer subprocess (``script`` in this directory, given ``url``), asked one line at a time."""

    def __init__(self, python: str, script: str, url: str) -> None:
        self._errors = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed by close())
        self._process = subprocess.Popen(
            [python, str(PEERS_DIR / script), url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            text=True,
        )

    def ask(self, **request: Any) -> dict[str, Any]:
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(json.dumps(request) + "\n")
            stdin.flush()
        except BrokenPipeError:
            pass
        line = stdout.readline()
        if not line:
            raise PeerError(f"the peer process ended: {self.errors()}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise PeerError(f"{request}: {answer['error']}")
        return answer

    def errors(self, lines: int = 8) -> str:
        """The last lines the peer wrote on stderr."""
        self._errors.seek(0)
        return "".join(self._errors.readlines()[-lines:]).strip() or "(nothing on stderr)"

    def close(self) -> None:
        """Ask the peer to delete what it wrote, and wait for it."""
        if self._process.poll() is None:
            with contextlib.suppress(PeerError, OSError):
                self.ask(op="close")
            try:
                self._process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._errors.close()


def load() -> str:
    """The 1, 5 and 15 minute load averages, for the benchmarks' headers."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}/{five:.2f}/{fifteen:.2f}"


def start_peer(script: str, url: str) -> PeerProcess | None:
    """Start ``script`` (beside this file) in the peers' interpreter against ``url``, or
    say why the peers are not measured and return ``None``."""
    python = peers_python()
    if python is None:
        print(f"peers not measured: no peers' interpreter. {SETUP}")
        return None
    try:
        peer = PeerProcess(python, script, url)
    except OSError as exc:
        print(f"peers not measured: cannot run {python}: {exc}. {SETUP}")
        return None
    try:
        found = peer.ask(op="versions")["versions"]
    except PeerError as exc:
        print(f"peers not measured: {exc}")
        peer.close()
        return None
    print("peers (" + python + "): " + ", ".join(f"{k} {v}" for k, v in found.items()))
    return peer
