"""The admin command's command line (issue 27 items 9 and 11): global options before the
sub-command, passwords kept out of argparse's errors, read-only commands that create no
store, exit codes instead of tracebacks, ``--version``, a second SIGTERM to
``sweep --every``, an ``--agent`` with a store of its own, hints that name commands,
exports readable by their owner only."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import fork_server
import pytest
from admin_agent import APPROVING, CRASHED, DONE, populate
from helpers import until

from lousho_sessions import __version__
from lousho_sessions.admin import main
from lousho_sessions.sqlite import SqliteStore

# one populated store per module: on one pytest-xdist worker (``make test`` runs ``--dist loadgroup``)
pytestmark = pytest.mark.xdist_group("test_admin_cli")

TESTS = Path(__file__).parent


def run(*argv: str) -> tuple[int, str, str]:
    """``lousho ARGV`` in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store with finished sessions and turns paused on an approval."""
    url = f"sqlite:///{tmp_path_factory.mktemp('cli')}/admin.db"
    populate(url)
    return url


def test_global_options_go_before_the_sub_command(sqlite_url: str) -> None:
    code, out, err = run("--store", sqlite_url, "--json", "sessions", "list")
    assert code == 0, err
    assert sorted(r["id"] for r in json.loads(out)) == sorted(DONE + APPROVING)
    code, out, _ = run("--json", "sessions", "list", "--store", sqlite_url)
    assert code == 0 and json.loads(out)
    code, out, _ = run("--store", sqlite_url, "doctor", "--json")  # mixed
    assert code in (0, 1) and {c["check"] for c in json.loads(out)} >= {"store", "turns"}
    code, out, _ = run("--store", "memory:", "sessions", "list")  # the table, not JSON
    assert code == 0 and out.strip() == "(none)"


def test_a_url_in_a_usage_error_is_shown_without_its_password() -> None:
    code, _, err = run("sessions", "list", "extra", "postgresql://app:topsecret@db/x")
    assert code == 2 and "unrecognized arguments" in err
    assert "topsecret" not in err and "postgresql://app:***@db/x" in err
    code, _, err = run("--store", "redis://:raw@secret@h/0", "frobnicate")
    assert code == 2 and "secret" not in err


def test_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lousho_sessions", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == f"lousho {__version__}"


@pytest.mark.parametrize(
    "argv",
    [
        ["sessions", "list"],
        ["sessions", "show", "alpha"],
        ["sessions", "export"],
        ["turns", "list"],
        ["turns", "show", "alpha.turn-0"],
        ["approvals", "list"],
        ["doctor"],
        ["sweep", "--dry-run"],
    ],
)
def test_read_only_commands_create_no_store(tmp_path: Path, argv: list[str]) -> None:
    for url, made in (
        (f"sqlite:///{tmp_path}/typo.db", tmp_path / "typo.db"),
        (f"file://{tmp_path}/typo-dir", tmp_path / "typo-dir"),
    ):
        code, out, err = run(*argv, "--store", url)
        assert code == 3, (argv, url, out, err)
        assert "creates no store" in err and str(made) in err
        assert not made.exists() and not Path(f"{made}.locks").exists()
    code, _, err = run("migrate", "--from", f"sqlite:///{tmp_path}/no.db", "--to", "memory:")
    assert code == 3 and "no SQLite database" in err and not (tmp_path / "no.db").exists()


def test_a_relative_sqlite_url_naming_an_absolute_database_says_how_to_write_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "here.db"
    SqliteStore(str(db)).close()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # three slashes: relative to here, where it is not
    code, _, err = run("sessions", "list", "--store", f"sqlite://{db}")
    assert code == 3, err
    assert f"no SQLite database {str(db)[1:]!r}" in err
    assert f"write sqlite:///{db}" in err
    assert run("sessions", "list", "--store", f"sqlite:///{db}")[0] == 0  # as it says
    # a database missing at both readings gets no such hint
    code, _, err = run("sessions", "list", "--store", f"sqlite://{tmp_path}/none.db")
    assert code == 3 and "no SQLite database" in err and "write sqlite" not in err


def test_errors_that_were_tracebacks_are_usage_errors(tmp_path: Path) -> None:
    cases = {
        "malformed URL": ["doctor", "--store", "redis://[::1/0"],
        "malformed URL 2": ["sessions", "list", "--store", "postgresql://[bad/x"],
        "age overflows": ["prune", "--store", "memory:", "--older-than", "99999999999999w"],
        "stale age overflows": [
            "turns", "list", "--stale", "--older-than", "1e300", "--store", "memory:",
        ],
        "no export directory": [
            "sessions", "export", "--store", "memory:", "-o", str(tmp_path / "no" / "x.json"),
        ],
        "bad approval id": ["approvals", "resolve", "bad id!", "--approve", "--store", "memory:"],
    }  # fmt: skip
    for what, argv in cases.items():
        code, _, err = run(*argv)
        assert code == 2, (what, err)
        assert "Traceback" not in err and err.strip(), what
    assert not (tmp_path / "no").exists()


def test_an_export_is_readable_by_its_owner_only(sqlite_url: str, tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        target = tmp_path / "out.json"
        code, _, err = run("sessions", "export", "--store", sqlite_url, "-o", str(target))
        assert code == 0, err
        target.chmod(0o644)  # an older export, readable by all: overwritten, made private
        code, _, err = run("sessions", "export", "--store", sqlite_url, "-o", str(target))
        assert code == 0, err
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert json.loads(target.read_text())["sessions"]
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temporary file left


def test_an_agent_with_a_store_of_its_own_is_named(tmp_path: Path, sqlite_url: str) -> None:
    (tmp_path / "own_store_agent.py").write_text(
        "from lousho_sessions import create_agent\n"
        f"agent = create_agent(model='demo', store='sqlite:///{tmp_path}/elsewhere.db')\n"
    )
    done = fork_server.run(
        ["-m", "lousho_sessions", "sweep", "--store", sqlite_url,
         "--agent", "own_store_agent:agent"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "has a store of its own" in done.stderr and "elsewhere.db" in done.stderr
    # the agent made on --store (a function taking it) is not
    code, _, err = run("sweep", "--store", sqlite_url, "--agent", "admin_agent:make")
    assert code == 0 and "store of its own" not in err


def test_hints_name_commands_not_python_calls(sqlite_url: str) -> None:
    turn = f"{APPROVING[0]}.turn-0"
    code, _, err = run(
        "turns", "resume", turn, "--store", sqlite_url, "--agent", "admin_agent:make"
    )
    assert code == 1, err
    assert "lousho approvals resolve" in err and "lousho turns discard" in err
    assert "agent.approvals.resolve()" not in err and "discard_pending()" not in err


def _crashed_store(url: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(TESTS), "ADMIN_TEST_CRASH": "1"}
    crashed = fork_server.run([str(TESTS / "admin_agent.py"), url], env=env, timeout=120)
    assert crashed.returncode == 3  # os._exit(3) in the work tool, mid-turn


def test_a_second_sigterm_stops_sweep_every_at_once(tmp_path: Path) -> None:
    """The first SIGTERM waits for the sweep in progress; a second stops at once, even
    while tools run (the interpreter used to wait for them at exit), saying what finished."""
    url = f"sqlite:///{tmp_path}/every.db"
    _crashed_store(url)
    marks = tmp_path / "started"
    (tmp_path / "blocking_agent.py").write_text(
        textwrap.dedent(
            f"""
            import threading
            from admin_agent import deploy, model
            from lousho_sessions import FunctionProvider, create_agent, tool

            @tool
            def work() -> str:
                \"\"\"Never ends by itself.\"\"\"
                with open({str(marks)!r}, "a") as f:
                    f.write("started\\n")
                threading.Event().wait(600)
                return "late"

            def make(store):
                return create_agent(
                    provider=FunctionProvider(model), tools=[work, deploy], store=store
                )
            """
        )
    )
    child = fork_server.Popen(
        ["-m", "lousho_sessions", "sweep", "--every", "0.2", "--json",
         "--store", url, "--agent", "blocking_agent:make"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])},
    )  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(iter(child.stderr.readline, "")),  # type: ignore[union-attr]
        daemon=True,
    )
    reader.start()
    try:
        until(lambda: marks.exists() and len(marks.read_text().split()) == len(CRASHED),
              "the tools running", 60)  # fmt: skip
        child.send_signal(signal.SIGTERM)
        until(lambda: any("stopping after" in line for line in lines), "the first signal", 30)
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    reader.join(10)
    child.stderr.close()  # type: ignore[union-attr]
    err = "".join(lines)
    assert child.returncode == 130, err
    assert "stopped at once" in err and "finished before it: none" in err
