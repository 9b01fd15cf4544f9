"""Child processes forked from a server that has imported the package already.

A child started with the "spawn" method or as ``python script.py`` imports lousho_sessions
and its dependencies afresh: about half a second of CPU each, and the crash, race and
multi-process tests start hundreds. Here children fork from multiprocessing's fork server,
started once per test process with those imports done (``PRELOAD``). The server is a new
interpreter that has imported modules and nothing else: no threads, no connections, no
files open. So a child is what a new interpreter is after the same imports; it dies by
``SIGKILL`` or ``os._exit`` as any process does.

``CONTEXT`` is a multiprocessing context (``Process``, ``Queue``, ``Event``, ``Barrier``)
used as the "spawn" one was. ``Popen`` and ``run`` are ``subprocess``'s, given the
interpreter's arguments without the interpreter (``[script, *args]``, ``["-c", code]``,
``["-m", module, *args]``, after ``-W what`` options): the child runs them as ``python``
would, with the environment, directory and standard streams ``subprocess`` gives it, and
exits as the interpreter does (non-daemon threads joined, ``atexit`` functions run).
Tests of the interpreter's own start (imports, the console script) keep ``subprocess``.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import multiprocessing
import multiprocessing.forkserver
import os
import runpy
import subprocess
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from multiprocessing import reduction
from multiprocessing.context import ForkServerContext, ForkServerProcess
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent
#: Imported once by the server: what most children import (about 95% of a child's start).
PRELOAD = [
    "lousho_sessions",
    "lousho_sessions.postgres",
    "lousho_sessions.redis",
    "lousho_sessions.sqlite",
    "lousho_sessions.testing",
    "psycopg",
    "psycopg_pool",
    "redis",
    "pytest",
    "hypothesis",
    "storekit",
]

_lock = threading.Lock()
_started = False


@contextmanager
def _environment(**values: str) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def start() -> None:
    """Start this process's fork server, if it is not running yet.

    The server is a new interpreter: it gets this process's import path (the tests and
    examples folders pytest put on it) through ``PYTHONPATH``, as Python 3.11's fork server
    does not pass it on."""
    global _started
    with _lock:
        if _started:
            return
        multiprocessing.set_forkserver_preload(PRELOAD)
        path = os.pathsep.join(p for p in sys.path if p)
        with _environment(PYTHONPATH=path):
            multiprocessing.forkserver.ensure_running()
        _started = True


class _Process(ForkServerProcess):
    """A process whose environment, standard output and error are its parent's at
    ``start()`` (as a spawned child's are: pytest's capture of the test), not the server's."""

    def start(self) -> None:
        start()
        super().start()

    def __getstate__(self) -> dict[str, Any]:
        # pickled by start(), for the server: the descriptors travel with the process
        stdio = [reduction.DupFd(1), reduction.DupFd(2)]
        return {**self.__dict__, "_stdio": stdio, "_environ": dict(os.environ)}

    def run(self) -> None:
        for number, passed in enumerate(self.__dict__.pop("_stdio", ()), start=1):
            fd = passed.detach()
            os.dup2(fd, number)
            os.close(fd)
        environ = self.__dict__.pop("_environ", None)
        if environ is not None:
            os.environ.clear()
            os.environ.update(environ)
        super().run()


class _Context(ForkServerContext):
    Process = _Process


CONTEXT = _Context()


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _main(args: list[str]) -> Callable[[], object]:
    """What ``python args...`` runs (``-W what``, ``-c code``, ``-m module`` or a script),
    with ``sys.argv`` and ``sys.path[0]`` as the interpreter sets them."""
    while args and args[0] == "-W":
        warnings.simplefilter(args[1])  # type: ignore[arg-type]
        args = args[2:]
    if args[0] == "-c":
        code = args[1]
        sys.argv = ["-c", *args[2:]]
        sys.path.insert(0, "")
        return lambda: exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
    if args[0] == "-m":
        module = args[1]
        sys.argv = [module, *args[2:]]
        sys.path.insert(0, os.getcwd())
        return lambda: runpy.run_module(module, run_name="__main__", alter_sys=True)
    if args[0].startswith("-"):
        raise ValueError(f"fork_server: the option {args[0]!r} is not supported")
    sys.argv = list(args)
    sys.path.insert(0, str(Path(args[0]).resolve().parent))
    return lambda: runpy.run_path(args[0], run_name="__main__")


def _stream(fd: int, mode: str, unbuffered: bool, **options: Any) -> io.TextIOWrapper:
    """The text stream a new interpreter makes on ``fd``."""
    raw = io.FileIO(fd, mode, closefd=False)
    if mode == "w" and raw.isatty():
        options["line_buffering"] = True
    if unbuffered and mode == "w":  # PYTHONUNBUFFERED, as ``python -u``
        return io.TextIOWrapper(raw, encoding="utf-8", write_through=True, **options)
    buffered = io.BufferedWriter(raw) if mode == "w" else io.BufferedReader(raw)
    return io.TextIOWrapper(buffered, encoding="utf-8", **options)


def _child(args: list[str], fds: list[Any], cwd: str | None, env: dict[str, str]) -> None:
    """The forked child: ``python args...`` with ``fds`` (``DupFd``) as its standard streams,
    in ``cwd``, with the environment ``env``; exits as the interpreter would."""
    for number, passed in enumerate(fds):
        fd = passed.detach()
        if fd != number:
            os.dup2(fd, number)
            os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    # the import path this process had, after what the child's PYTHONPATH names
    sys.path[0:0] = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdin = _stream(0, "r", False)
    sys.stdout = _stream(1, "w", unbuffered)
    sys.stderr = _stream(2, "w", unbuffered, line_buffering=True, errors="backslashreplace")
    if cwd is not None:
        os.chdir(cwd)
    try:
        _main(args)()
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:
        traceback.print_exc()
        code = 1
    # what the interpreter does at exit: wait for non-daemon threads, run atexit functions
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


class Popen(subprocess.Popen[Any]):
    """``subprocess.Popen([sys.executable, *args], ...)`` whose child forks from the server."""

    _process: Any

    def __init__(self, args: Sequence[str], **options: Any) -> None:
        super().__init__([sys.executable, *args], **options)

    def _execute_child(
        self,
        args: list[str],
        executable: Any,
        preexec_fn: Any,
        close_fds: bool,
        pass_fds: Any,
        cwd: Any,
        env: Any,
        startupinfo: Any,
        creationflags: int,
        shell: bool,
        p2cread: int,
        p2cwrite: int,
        c2pread: int,
        c2pwrite: int,
        errread: int,
        errwrite: int,
        *rest: Any,
    ) -> None:
        # -1: the stream is this process's (as a subprocess inherits it)
        ends = [p2cread, c2pwrite, errwrite]
        fds = [reduction.DupFd(n if fd == -1 else fd) for n, fd in enumerate(ends)]
        environment = dict(os.environ if env is None else env)
        where = None if cwd is None else os.fspath(cwd)
        self._process = CONTEXT.Process(target=_child, args=(args[1:], fds, where, environment))
        try:
            self._process.start()
        finally:
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)  # type: ignore[attr-defined]
        self.pid = self._process.pid
        self._child_created = True

    def _internal_poll(self, *args: Any, **kwargs: Any) -> int | None:
        if self.returncode is None and self._process.exitcode is not None:
            self.returncode = self._process.exitcode
        return self.returncode

    def _wait(self, timeout: float | None) -> int:
        if self.returncode is None:
            self._process.join(timeout)
            if self._process.exitcode is None:
                raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
            self.returncode = self._process.exitcode
        return self.returncode


def run(
    args: Sequence[str],
    *,
    input: str | bytes | None = None,
    capture_output: bool = False,
    timeout: float | None = None,
    check: bool = False,
    **options: Any,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run([sys.executable, *args], ...)`` whose child forks from the server."""
    if capture_output:
        options.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        options["stdin"] = subprocess.PIPE
    with Popen(args, **options) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        code = process.poll()
        assert code is not None
    done = subprocess.CompletedProcess(process.args, code, stdout, stderr)
    if check:
        done.check_returncode()
    return done
