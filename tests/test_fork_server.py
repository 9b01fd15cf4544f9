"""The fork server's children behave as ``python ...`` subprocesses do (tests/fork_server.py):
exit codes, standard streams, environment, directory, and the interpreter's exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import fork_server
import pytest

EXIT = """
import atexit, sys, threading
atexit.register(lambda: print("atexit ran", flush=True))
event = threading.Event()
threading.Thread(target=lambda: (event.wait(0.2), print("thread finished"))).start()
print("main done")
"""


def both(args: list[str], **options: Any) -> tuple[subprocess.CompletedProcess[str], ...]:
    """``python args...`` run as a subprocess, then forked from the server."""
    real = subprocess.run([sys.executable, *args], text=True, timeout=60, **options)
    forked = fork_server.run(args, text=True, timeout=60, **options)
    return real, forked


@pytest.mark.parametrize(
    "code",
    [
        "print('out'); import sys; print('err', file=sys.stderr)",
        "import sys; sys.exit(3)",
        "import sys; sys.exit('a message')",
        "raise ValueError('uncaught')",
        "import os; print('lost'); os._exit(17)",
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
        EXIT,
        "import sys; print(sys.argv, sys.stdin.read().upper())",
        "import os; print(os.environ.get('FORK_SERVER_TEST'), os.getcwd())",
    ],
)
def test_a_forked_child_is_a_subprocess(code: str, tmp_path: Path) -> None:
    env = {**os.environ, "FORK_SERVER_TEST": "here"}
    real, forked = both(["-c", code], capture_output=True, input="typed", cwd=tmp_path, env=env)
    assert forked.returncode == real.returncode
    assert forked.stdout == real.stdout
    assert forked.stderr.splitlines()[-1:] == real.stderr.splitlines()[-1:]


def test_stderr_to_stdout_and_a_script_with_arguments(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text("import sys\nprint(sys.argv[1:])\nprint('e', file=sys.stderr)\n")
    real, forked = both([str(script), "a", "b"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert (forked.returncode, forked.stdout) == (real.returncode, real.stdout) == (0, real.stdout)
    assert sorted(real.stdout.splitlines()) == ["['a', 'b']", "e"]


def test_a_module_runs_as_main() -> None:
    real, forked = both(["-m", "lousho_sessions", "--version"], capture_output=True)
    assert (forked.returncode, forked.stdout) == (real.returncode, real.stdout)
    assert real.returncode == 0 and real.stdout


def test_a_running_child_is_signalled_and_waited_for() -> None:
    child = fork_server.Popen(
        ["-c", "import time; print('up', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline() == "up\n"
    assert child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.1)
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=60) == -signal.SIGTERM
    child.stdout.close()


def test_a_process_writes_where_the_test_reads(capfd: pytest.CaptureFixture[str]) -> None:
    """A ``CONTEXT`` child's output goes to its parent's streams, as a spawned child's does."""
    child = fork_server.CONTEXT.Process(target=print, args=("from the child",))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert capfd.readouterr().out == "from the child\n"


def _environment_variable(name: str) -> None:
    print(os.environ.get(name))


def test_a_process_has_the_environment_of_its_start(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fork_server.start()  # the server's environment has no FORK_SERVER_TEST
    monkeypatch.setenv("FORK_SERVER_TEST", "set after the server started")
    child = fork_server.CONTEXT.Process(target=_environment_variable, args=("FORK_SERVER_TEST",))
    child.start()
    child.join(60)
    assert capfd.readouterr().out == "set after the server started\n"
