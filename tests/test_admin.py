"""The admin command (``python -m lousho_sessions``), run as a real subprocess over every
store kind (issue 17 items 4 and 5).

One populated store per kind per module (``tests/admin_agent.py`` fills it: finished
sessions, turns paused on approvals, turns left running by a process that died).
Read-only commands run first; the ones that change the store run after, in file
order, each on sessions of its own.
"""

from __future__ import annotations

import itertools
import json
import os
import pty
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import fork_server
import pytest
from admin_agent import APPROVING, CRASHED, DONE
from services_pg import drop_schema, postgres_url, require_postgres
from services_redis import drop_prefix, redis_url, require_redis

from lousho_sessions import open_store
from lousho_sessions.recovery import stale_turns
from lousho_sessions.stores.base import SaveState

# one populated store per kind per module: on one pytest-xdist worker (``make test`` runs ``--dist loadgroup``)
pytestmark = pytest.mark.xdist_group("test_admin")

TESTS = Path(__file__).parent
#: tests/ importable in the subprocesses, before what PYTHONPATH held (a checkout's own code)
PYTHONPATH = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p)
KINDS = ("sqlite", "files", "postgres", "redis")
ALL = sorted(DONE + APPROVING + CRASHED)


def lousho(
    *args: str, env: dict[str, str] | None = None, stderr: Any = subprocess.PIPE
) -> subprocess.CompletedProcess[str]:
    """``python -m lousho_sessions ARGS``, with tests/ importable (for ``--agent``)."""
    full_env = {k: v for k, v in os.environ.items() if k != "LOUSHO_STORE"}
    full_env.update(PYTHONPATH=PYTHONPATH, **(env or {}))
    return fork_server.run(
        ["-m", "lousho_sessions", *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=full_env,
        timeout=120,
    )


def ok_json(*args: str, code: int = 0) -> Any:
    """The parsed ``--json`` output of a run that must exit with ``code``."""
    done = lousho(*args, "--json")
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    return json.loads(done.stdout)


def populate(url: str) -> None:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    fork_server.run([str(TESTS / "admin_agent.py"), url], env=env, check=True, timeout=120)
    crashed = fork_server.run(
        [str(TESTS / "admin_agent.py"), url],
        env={**env, "ADMIN_TEST_CRASH": "1"},
        timeout=120,
    )
    assert crashed.returncode == 3  # os._exit(3) in the work tool, mid-turn


def _with_option(url: str, option: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{option}"


def new_url(kind: str, where: Path) -> tuple[str, Any]:
    """A URL of a fresh, empty store of ``kind``, and what drops it afterwards."""
    if kind == "sqlite":
        return f"sqlite:///{where}/admin.db", lambda: None
    if kind == "files":
        return f"file://{where}/files", lambda: None
    if kind == "postgres":
        require_postgres()
        schema = "t_admin_" + secrets.token_hex(6)
        # a short lease: the turns the populator's crash leaves are free to resume soon
        url = _with_option(postgres_url(), f"schema={schema}&lease_ttl=1")
        return url, lambda: drop_schema(schema)
    require_redis()
    prefix = "lousho-test-admin-" + secrets.token_hex(6)
    return _with_option(redis_url(), f"prefix={prefix}&lease_ttl=1"), lambda: drop_prefix(prefix)


@pytest.fixture(scope="module", params=KINDS)
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    url, drop = new_url(request.param, tmp_path_factory.mktemp(request.param))
    try:
        populate(url)
        wait_until_stale(url, len(CRASHED))
        yield url
    finally:
        drop()


def wait_until_stale(url: str, count: int) -> None:
    """Until ``count`` crashed turns are stale: PostgreSQL and Redis leases must run out first."""
    with open_store(url) as opened:
        deadline = time.monotonic() + 60
        while len(stale_turns(opened)) < count:
            assert time.monotonic() < deadline, "the crashed turns' leases never ran out"
            threading.Event().wait(0.1)


# -- no store needed --------------------------------------------------------------------

COMMANDS = [
    ["sessions", "list"],
    ["sessions", "show"],
    ["sessions", "export"],
    ["sessions", "rm"],
    ["turns", "list"],
    ["turns", "show"],
    ["turns", "resume"],
    ["turns", "discard"],
    ["approvals", "list"],
    ["approvals", "resolve"],
    ["prune"],
    ["sweep"],
    ["migrate"],
    ["doctor"],
]


def test_help_of_the_command_and_every_sub_command() -> None:
    top = lousho("--help")
    assert top.returncode == 0
    for word in ("sessions", "turns", "approvals", "prune", "sweep", "migrate", "doctor"):
        assert word in top.stdout
    assert "exit codes" in top.stdout and "sqlite:///" in top.stdout
    # every sub-command's help, in one more interpreter (one per help would be slow)
    code = (
        "import contextlib, io, json, sys\n"
        "from lousho_sessions.admin import main\n"
        "out = {}\n"
        f"for words in {COMMANDS!r}:\n"
        "    buf = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buf):\n"
        "        code = main([*words, '--help'])\n"
        "    out[' '.join(words)] = [code, buf.getvalue()]\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    helps = json.loads(done.stdout)
    for words in COMMANDS:
        code_, text = helps[" ".join(words)]
        assert code_ == 0, words
        assert f"usage: lousho {' '.join(words)}" in text, words
        assert "--json" in text, words
        assert ("--store URL" in text) == (words[0] != "migrate"), words
    assert "--agent MODULE:ATTR" in helps["turns resume"][1]
    assert "--dry-run" in helps["sweep"][1] and "--agent" in helps["sweep"][1]
    assert "--from URL" in helps["migrate"][1] and "checksum" in helps["migrate"][1]
    assert "--older-than" in helps["prune"][1]
    assert "--stale" in helps["turns list"][1] and "--status" in helps["turns list"][1]
    assert "PgBouncer" in helps["doctor"][1] and "WAL" in helps["doctor"][1]


def test_the_lousho_console_script_is_installed() -> None:
    script = Path(sys.executable).with_name("lousho")
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "usage: lousho" in done.stdout


def test_usage_errors_exit_2() -> None:
    no_store = lousho("sessions", "list")
    assert no_store.returncode == 2 and "LOUSHO_STORE" in no_store.stderr
    bad_url, unknown, bad_age, no_turn = batch(
        None,
        ["sessions", "list", "--store", "mysql://u:secret@h/db"],
        ["sessions", "frobnicate"],
        ["prune", "--store", "memory:", "--older-than", "soon"],
        ["turns", "resume", "a.turn-0", "--store", "memory:"],
    )
    assert bad_url.code == 2 and "unknown store URL" in bad_url.stderr
    assert "secret" not in bad_url.stderr
    assert unknown.code == 2 and bad_age.code == 2
    assert no_turn.code == 1 and "no unfinished turn" in no_turn.stderr


def test_store_errors_exit_3() -> None:
    done = lousho("doctor", "--store", "postgresql://app:secret@127.0.0.1:1/db?connect_timeout=2")
    assert done.returncode == 3 and "postgresql://app:***@127.0.0.1:1/db" in done.stderr
    assert "secret" not in done.stderr


def test_memory_store_from_the_environment() -> None:
    done = lousho("sessions", "list", "--json", env={"LOUSHO_STORE": "memory:"})
    assert done.returncode == 0 and json.loads(done.stdout) == []
    doctor = lousho("doctor", "--store", "memory:", "--json")
    assert doctor.returncode == 0
    assert {c["check"] for c in json.loads(doctor.stdout)} >= {"store", "sessions", "turns"}


# -- read-only, every kind ---------------------------------------------------------------


class Ran:
    """One command line's exit code and output, from ``batch``."""

    def __init__(self, code: int, stdout: str, stderr: str) -> None:
        self.code, self.stdout, self.stderr = code, stdout, stderr

    def json(self, code: int = 0) -> Any:
        assert self.code == code, (self.code, self.stdout, self.stderr)
        return json.loads(self.stdout)


def batch(store: str | None, *commands: Sequence[str]) -> list[Ran]:
    """Run each command line (``--store`` added unless None) in one more interpreter:
    tests/admin_batch.py."""
    argvs = [[*c, *(() if store is None else ("--store", store))] for c in commands]
    env = {k: v for k, v in os.environ.items() if k != "LOUSHO_STORE"}
    done = fork_server.run(
        [str(TESTS / "admin_batch.py")],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": PYTHONPATH},
        timeout=300,
        check=True,
    )
    return [Ran(*r) for r in json.loads(done.stdout)]


def kind_of(store: str) -> str:
    return store.split(":", 1)[0]


def test_sessions_list(store: str) -> None:
    # this one as `python -m lousho_sessions` itself, on every kind
    rows = ok_json("sessions", "list", "--store", store)
    assert [r["id"] for r in rows] == ALL
    by_id = {r["id"]: r for r in rows}
    assert by_id["alpha"]["messages"] == 6 and by_id["beta"]["messages"] == 2
    assert by_id["alpha"]["updated_at"].endswith("+00:00")
    assert by_id["gamma"]["messages"] is None  # its first turn waits: no transcript yet
    assert by_id["gamma"]["pending_turn"] == "awaiting-approval"
    assert by_id["gamma"]["pending_approvals"] == 1
    assert by_id["delta"]["pending_turn"] == "running"
    # alpha: three model calls; the totals of each usage field
    assert by_id["alpha"]["usage"] == {
        "input_tokens": 300,
        "output_tokens": 60,
        "cost_usd": pytest.approx(0.003),
        "cache_read_tokens": 240,
        "cache_write_tokens": 30,
        "reasoning_tokens": 15,
    }
    assert by_id["gamma"]["usage"] is None
    table = lousho("sessions", "list", "--store", store)
    assert table.returncode == 0
    assert table.stdout.splitlines()[0].split()[:3] == ["ID", "MESSAGES", "TOKENS"]
    assert any(
        line.split()[:6] == ["alpha", "6", "300/60", "(80%", "cached)", "0.0030"]
        for line in table.stdout.splitlines()
    )
    (limited,) = batch(store, ["sessions", "list", "--limit", "2", "--json"])
    assert limited.json() == rows[:2]


def test_sessions_show_and_export(store: str, tmp_path: Path) -> None:
    out = tmp_path / "export.json"
    alpha, gamma, table, missing, invalid, everything, some, to_file = batch(
        store,
        ["sessions", "show", "alpha", "--json"],
        ["sessions", "show", "gamma", "--json"],
        ["sessions", "show", "alpha"],
        ["sessions", "show", "nobody"],
        ["sessions", "show", "../x"],
        ["sessions", "export", "--json"],
        ["sessions", "export", "beta", "gamma"],
        ["sessions", "export", "-o", str(out)],
    )
    shown = alpha.json()
    assert [m["role"] for m in shown["messages"]] == [
        "user", "assistant", "user", "assistant", "tool", "assistant",
    ]  # fmt: skip
    assert shown["turns"] == [] and shown["approvals"] == []
    assert (shown["usage"]["input_tokens"], shown["usage"]["cache_read_tokens"]) == (300, 240)
    waiting = gamma.json()
    assert waiting["turns"][0]["status"] == "awaiting-approval"
    assert waiting["approvals"][0]["tool"] == "deploy"
    assert table.code == 0 and "done: worked" in table.stdout
    assert "300/60 (80% cached)" in table.stdout and "0.0030" in table.stdout
    assert missing.code == 1 and "no session 'nobody'" in missing.stderr
    assert invalid.code == 2
    document = everything.json()
    assert (document["format"], document["version"]) == ("lousho.export", 1)
    assert [s["id"] for s in document["sessions"]] == ALL
    assert document["sessions"][0]["messages"][0]["content"][0]["text"] == "hello"
    delta = next(s for s in document["sessions"] if s["id"] == "delta")
    assert list(delta["checkpoints"]) == ["delta.turn-0"]
    assert delta["checkpoints"]["delta.turn-0"]["status"] == "running"
    assert [s["id"] for s in some.json()["sessions"]] == ["beta", "gamma"]
    assert to_file.code == 0 and json.loads(out.read_text()) == document


def test_turns_and_approvals_lists(store: str) -> None:
    (
        rows, waiting, stale, fresh, one, shown, turn_table, unknown, invalid,
        pending, denied, of_eta, approvals_table,
    ) = batch(
        store,
        ["turns", "list", "--json"],
        ["turns", "list", "--status", "awaiting-approval", "--json"],
        ["turns", "list", "--stale", "--older-than", "0", "--json"],
        ["turns", "list", "--stale", "--older-than", "1h", "--json"],
        ["turns", "list", "--session", "gamma", "--json"],
        ["turns", "show", "delta.turn-0", "--json"],
        ["turns", "show", "delta.turn-0"],
        ["turns", "show", "alpha.turn-9"],
        ["turns", "show", "not a turn"],
        ["approvals", "list", "--json"],
        ["approvals", "list", "--status", "denied", "--json"],
        ["approvals", "list", "--session", "eta", "--json"],
        ["approvals", "list"],
    )  # fmt: skip
    assert {r["turn_id"]: r["status"] for r in rows.json()} == {
        **{f"{id}.turn-0": "awaiting-approval" for id in APPROVING},
        **{f"{id}.turn-0": "running" for id in CRASHED},
    }
    assert sorted(r["session_id"] for r in waiting.json()) == sorted(APPROVING)
    assert all(r["approval_id"] for r in waiting.json())
    assert sorted(r["session_id"] for r in stale.json()) == sorted(CRASHED)
    assert fresh.json() == [] and len(one.json()) == 1
    checkpoint = shown.json()
    assert checkpoint["status"] == "running" and checkpoint["steps"] == 1
    assert checkpoint["checkpoint"]["format"] == "lousho.turn"
    assert checkpoint["checkpoint"]["new"][1]["tool_calls"][0]["name"] == "work"
    assert turn_table.code == 0 and "call work" in turn_table.stdout
    assert unknown.code == 1 and invalid.code == 2
    records = pending.json()
    assert sorted(r["session_id"] for r in records) == sorted(APPROVING)
    assert all(r["status"] == "pending" and r["tool"] == "deploy" for r in records)
    assert denied.json() == [] and len(of_eta.json()) == 1
    assert approvals_table.code == 0 and "deploy" in approvals_table.stdout


def test_doctor(store: str) -> None:
    healthy, stale, table = batch(
        store, ["doctor", "--stale-after", "1h", "--json"], ["doctor", "--json"], ["doctor"]
    )
    checks = healthy.json()
    assert all(c["status"] == "ok" for c in checks), checks
    names = {c["check"] for c in checks}
    assert {"store", "sessions", "turns", "orphaned checkpoints", "pending approvals"} <= names
    expected = {
        "sqlite": {"schema version", "journal mode", "lock files"},
        "file": {"lock files", "temp files"},
        "postgresql": {"schema version", "leases", "pgbouncer"},
        "redis": {"server version", "leases", "approval records"},
    }
    kind = checks[0]["detail"].split()[0]
    assert expected[kind] <= names
    turns = next(c for c in stale.json(code=1) if c["check"] == "turns")
    assert turns["status"] == "warn" and "3 running, 3 of them stale" in turns["detail"]
    assert [c["check"] for c in stale.json(code=1) if c["status"] != "ok"] == ["turns"]
    assert table.code == 1 and table.stdout.split()[:3] == ["CHECK", "STATUS", "DETAIL"]


# -- changing the store, every kind (each on sessions of its own) --------------------------

AGENT = ("--agent", "admin_agent:make")


def test_turns_resume_and_discard(store: str) -> None:
    without, resumed, after, again, discarded, gone, twice = batch(
        store,
        ["turns", "resume", "delta.turn-0"],
        ["turns", "resume", "delta.turn-0", *AGENT, "--json"],
        ["sessions", "show", "delta", "--json"],
        ["turns", "resume", "delta.turn-0", *AGENT],
        ["turns", "discard", "zeta.turn-0", "--json"],
        ["turns", "list", "--session", "zeta", "--json"],
        ["turns", "discard", "zeta.turn-0"],
    )
    assert without.code == 2 and "--agent" in without.stderr
    assert resumed.json()["outcome"] == "finished"
    result = resumed.json()["result"]
    assert (result["finish_reason"], result["text"]) == ("stop", "done: worked")
    assert after.json()["turns"] == [] and len(after.json()["messages"]) == 4
    assert again.code == 1 and "no unfinished turn" in again.stderr
    assert discarded.json()["discarded"] is True and gone.json() == []
    assert twice.code == 1


@pytest.fixture(params=KINDS)
def fresh_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store of its own, just populated: for a test whose figures no other test may move."""
    url, drop = new_url(request.param, tmp_path)
    try:
        populate(url)
        wait_until_stale(url, len(CRASHED))
        yield url
    finally:
        drop()


def test_sweep(fresh_store: str) -> None:
    crashed = [f"{id}.turn-0" for id in sorted(CRASHED)]
    dry, young, swept, left = batch(
        fresh_store,
        ["sweep", "--dry-run", "--json"],
        ["sweep", "--older-than", "1h", *AGENT, "--json"],
        ["sweep", *AGENT, "--json"],
        ["turns", "list", "--status", "running", "--json"],
    )
    assert sorted((r["turn_id"], r["attempts"]) for r in dry.json()) == [
        (turn, 0) for turn in crashed
    ]
    assert young.json() == []  # not an hour old
    assert sorted((r["turn_id"], r["outcome"], r["finish_reason"]) for r in swept.json()) == [
        (turn, "finished", "stop") for turn in crashed
    ]
    assert [r["attempts"] for r in swept.json()] == [1] * len(CRASHED)
    assert left.json() == []


def test_approvals_resolve(store: str) -> None:
    (listed,) = batch(store, ["approvals", "list", "--json"])
    ids = {r["session_id"]: r["id"] for r in listed.json()}
    approved, denied, still, twice, unknown, undecided = batch(
        store,
        ["approvals", "resolve", ids["gamma"], "--approve", *AGENT, "--json"],
        ["approvals", "resolve", ids["eta"], "--deny", "--reason", "no", "--json"],
        ["turns", "list", "--session", "eta", "--json"],
        ["approvals", "resolve", ids["eta"], "--approve"],
        ["approvals", "resolve", "appr-nope", "--deny"],
        ["approvals", "resolve", ids["eta"]],
    )
    assert approved.json()["status"] == "approved"
    assert approved.json()["resumed"]["text"] == "done: deployed"
    assert (denied.json()["status"], denied.json()["resumed"]) == ("denied", None)
    # decided; the turn goes on at its session's next resume() or send()
    assert still.json()[0]["status"] == "awaiting-approval"
    assert twice.code == 1 and "already resolved" in twice.stderr
    assert unknown.code == 1 and "no approval" in unknown.stderr
    assert undecided.code == 2


def test_sessions_rm(store: str) -> None:
    some, listed, eta, records, turns = batch(
        store,
        ["sessions", "rm", "beta", "nobody", "--json"],
        ["sessions", "list", "--json"],
        ["sessions", "rm", "eta", "--json"],
        ["approvals", "list", "--session", "eta", "--status", "all", "--json"],
        ["turns", "list", "--session", "eta", "--json"],
    )
    assert some.json(code=1) == [  # one of them was not there
        {"id": "beta", "outcome": "deleted"},
        {"id": "nobody", "outcome": "missing"},
    ]
    assert "beta" not in [r["id"] for r in listed.json()]
    # eta had no transcript, a checkpoint and a resolved approval: all of it goes
    assert eta.json() == [{"id": "eta", "outcome": "deleted"}]
    assert records.json() == [] and turns.json() == []


def test_prune(fresh_store: str) -> None:
    with open_store(fresh_store) as opened:  # state of a session pruned, and of a scope
        sessions: Any = opened.sessions
        for id in ("alpha", "_scope-u1"):
            sessions.save_state(SaveState(id, {"of": id}, None, None, opened.checkpoints))
    kept, bad, everything, listed = batch(
        fresh_store,
        ["prune", "--older-than", "7d", "--json"],
        ["prune", "--older-than", "soon"],
        ["prune", "--older-than", "0", "--json"],
        ["sessions", "list", "--json"],
    )
    counts = kept.json()
    assert (counts["sessions"], counts["checkpoints"], counts["approvals"]) == (0, 0, 0)
    assert counts["older_than_seconds"] == 7 * 86400
    assert bad.code == 2 and "invalid age" in bad.stderr
    pruned = everything.json()
    # a store of its own (passes alone and in any order): alpha's and beta's transcripts,
    # the checkpoints of the three crashed turns and of the two awaiting approval
    assert (pruned["sessions"], pruned["checkpoints"]) == (2, 5)
    assert pruned["approvals"] == 0  # pending approvals are kept, and so listed
    assert [(r["id"], r["pending_approvals"]) for r in listed.json()][-2:] == [
        ("eta", 1),
        ("gamma", 1),
    ]
    with open_store(fresh_store) as opened:  # alpha's state went with it; the scope's stays
        sessions = opened.sessions
        assert sessions.load_state("alpha", opened.checkpoints) == ({}, 0)
        assert sessions.load_state("_scope-u1", opened.checkpoints)[0] == {"of": "_scope-u1"}


# -- migrate -----------------------------------------------------------------------------


def test_migrate_round_trips_sqlite_postgres_redis_files(tmp_path: Path) -> None:
    urls, drops = zip(
        *(new_url(kind, tmp_path) for kind in ("sqlite", "postgres", "redis", "files")),
        strict=True,
    )
    try:
        populate(urls[0])
        commands: list[list[str]] = [["sessions", "export", "--store", urls[0]]]
        for source, target in itertools.pairwise(urls):
            commands.append(["migrate", "--from", source, "--to", target, "--json"])
            commands.append(["sessions", "export", "--store", target])
        commands.append(["migrate", "--from", urls[0], "--to", urls[-1]])
        commands.append(["migrate", "--from", urls[0], "--to", urls[-1], "--force", "--json"])
        commands.append(["migrate", "--from", urls[0], "--to", urls[0]])
        first, *copies, again, forced, same = batch(None, *commands)
        exports = [first.json()]
        for migrated, exported in zip(copies[::2], copies[1::2], strict=True):
            report = migrated.json()
            assert report["verified"] is True
            assert report["source"] == report["target"]
            assert report["source"]["sessions"] == 2 and report["source"]["checkpoints"] == 5
            assert report["source"]["approvals"] == 2 and report["source"]["messages"] == 8
            exports.append(exported.json())
        assert all(e == exports[0] for e in exports[1:])  # sqlite = postgres = redis = files
        assert len(exports[0]["sessions"]) == len(ALL)
        # the destination holds them now: refused, then overwritten with --force
        assert again.code == 1 and "holds 7 of the sessions" in again.stderr
        assert forced.json()["verified"] is True
        assert same.code == 1 and "the same store" in same.stderr
    finally:
        for drop in drops:
            drop()


def test_progress_bar_only_on_a_terminal(tmp_path: Path) -> None:
    source, target = f"sqlite:///{tmp_path}/a.db", f"file://{tmp_path}/b"
    populate(source)
    plain = lousho("migrate", "--from", source, "--to", target)
    assert plain.returncode == 0 and plain.stderr == ""
    leader, follower = pty.openpty()
    try:
        done = lousho("migrate", "--from", source, "--to", target, "--force", stderr=follower)
        os.close(follower)
        follower = -1
        drawn = _read_all(leader)
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    assert done.returncode == 0
    assert "copy [" in drawn and f"{len(ALL)}/{len(ALL)}" in drawn and "#" * 30 in drawn


def _read_all(fd: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the other side is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def test_sweep_every_runs_until_sigterm(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/every.db"
    populate(url)
    env = {k: v for k, v in os.environ.items() if k != "LOUSHO_STORE"}
    child = fork_server.Popen(
        ["-m", "lousho_sessions", "sweep", "--every", "0.2", "--json",
         "--store", url, "--agent", "admin_agent:make"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "PYTHONPATH": PYTHONPATH},
    )  # fmt: skip
    try:
        assert child.stdout is not None
        swept = [json.loads(child.stdout.readline()) for _ in CRASHED]
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert sorted(r["turn_id"] for r in swept) == [f"{id}.turn-0" for id in CRASHED]
    assert {r["outcome"] for r in swept} == {"finished"}
    assert child.returncode == 0 and "stopped" in err and "'finished': 3" in err
