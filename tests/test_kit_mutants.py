"""The conformance kit catches broken stores: single-fault mutants of every shipped store.

A mutant is a shipped store with one method made wrong (a stale revision, a read that
misses appended messages, a write skipped, a fence ignored, a conflict swallowed,
checkpoints not deleted; a rewind or fork off by one, keeping the revision, overwriting,
forgetting the parent: ``history_mutants``; a turn's state dropped or saved apart from its
commit, a fork's state not copied, a prune leaving the state: ``state_mutants``). It is built by swapping the instance's part class for a
subclass holding the one faulty method, so the same faults apply to every store. The
kit tests that exercise that method (``testing._coverage.EXERCISED``), then the
end-to-end ones, run on it until one fails: the mutant is killed. Every mutant must be
killed, except those ``HARMLESS`` names with the reason: the list is checked both ways,
so a mutant that starts surviving fails here, and so does a listed one that is killed.
The three stores from issue 30 (one wrong fast-path override each, written to the docs)
must fail the kit run by pytest as a user runs it.
"""

from __future__ import annotations

import inspect
import re
import secrets
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
import test_store_kit as kits
from history_mutants import HISTORY_FAULTS
from services_pg import drop_schema, postgres_url, require_postgres
from services_redis import drop_prefix, prefix_for, require_redis
from state_mutants import STATE_FAULTS

from lousho_sessions.errors import StoreConflictError
from lousho_sessions.postgres import PostgresStore
from lousho_sessions.sqlite import SqliteStore
from lousho_sessions.stores.adapters import store_parts
from lousho_sessions.stores.base import CommitTurn, TakenTurn, TakeTurn
from lousho_sessions.testing import StoreContractTests
from lousho_sessions.testing._coverage import CONTRACT, EXERCISED, contract_methods, uncovered
from lousho_sessions.testing._support import opened

Fault = Callable[[Callable[..., Any]], Callable[..., Any]]

#: The end-to-end tests, run on a mutant that survives the tests of its method.
END_TO_END = (
    "test_end_to_end_two_sessions_take_turns",
    "test_end_to_end_durable_turn_with_a_tool",
    "test_end_to_end_approval_resolved_once",
)
#: Methods answering the session's revision after their write (given one ``CommitTurn``).
_COMMITS = ("commit_turn",)


def _rewrite(change: Callable[[Any, dict[str, Any]], None]) -> Fault:
    """A fault calling the right method with its arguments (or its request's fields) changed
    by ``change(self, args)``."""

    def fault(right: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(right)

        def faulty(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            request = bound.arguments.get("request")
            if isinstance(request, CommitTurn):
                fields = attrs.asdict(request, recurse=False)
                change(args[0], fields)
                bound.arguments["request"] = CommitTurn(**fields)
            else:
                change(args[0], bound.arguments)
            return right(*bound.args, **bound.kwargs)

        return faulty

    return fault


def _session_id(args: tuple[Any, ...]) -> str:
    first = args[0]
    return str(first.id) if isinstance(first, CommitTurn) else str(first)


def _skip_write(right: Callable[..., Any]) -> Callable[..., Any]:
    """A write that does nothing; a commit answers the (unchanged) revision as if it wrote."""
    committing = right.__name__ in _COMMITS

    def skipped(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self.revision(_session_id(args)) if committing else None

    return skipped


def _swallow_conflict(right: Callable[..., Any]) -> Callable[..., Any]:
    committing = right.__name__ in _COMMITS

    def swallowed(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return right(self, *args, **kwargs)
        except StoreConflictError:
            return self.revision(_session_id(args)) if committing else None

    return swallowed


def _taken(change: Callable[[TakenTurn, TakeTurn], TakenTurn]) -> Fault:
    """A ``take_turn`` whose answer is changed by ``change(taken, request)`` (the lease is
    the right one)."""

    def fault(right: Callable[..., Any]) -> Callable[..., Any]:
        def take_turn(self: Any, request: TakeTurn) -> TakenTurn:
            return change(right(self, request), request)

        return take_turn

    return fault


def _taken_stale(taken: TakenTurn, request: TakeTurn) -> TakenTurn:
    return attrs.evolve(taken, revision=None if taken.revision is None else "kit-stale")


def _taken_misses_appended(taken: TakenTurn, request: TakeTurn) -> TakenTurn:
    """ "Nothing new" after what the request holds, always."""
    held = request.held_length
    return taken if held is None else attrs.evolve(taken, messages=[], since=held)


def _taken_hides_pending(taken: TakenTurn, request: TakeTurn) -> TakenTurn:
    return attrs.evolve(taken, no_checkpoints=True)


def _taken_claims_saved(taken: TakenTurn, request: TakeTurn) -> TakenTurn:
    return attrs.evolve(taken, saved_checkpoint=True)


def _stale_revision(right: Callable[..., Any]) -> Callable[..., Any]:
    def revision(self: Any, id: str) -> object | None:
        return None if right(self, id) is None else "kit-stale"

    return revision


def _misses_appended(right: Callable[..., Any]) -> Callable[..., Any]:
    def load_since(self: Any, id: str, length: int, revision: object) -> list[Any]:
        return []

    return load_since


def _drop_fence(_: Any, args: dict[str, Any]) -> None:
    args["fence"] = None


def _keep_checkpoints(_: Any, args: dict[str, Any]) -> None:
    args["delete"] = ()


def _drop_arguments(_: Any, args: dict[str, Any]) -> None:
    args["arguments"] = None


def _ignore_length(self: Any, args: dict[str, Any]) -> None:
    args["expected_length"] = len(self.load(args["id"]) or [])


@attrs.frozen
class Mutant:
    fault: str  # what is wrong
    part: str  # "sessions", "checkpoints" or "approvals"
    method: str
    make: Fault
    #: a word in the names of the kit tests likeliest to catch it: they run first (speed only)
    hint: str = ""

    @property
    def name(self) -> str:
        return f"{self.fault}:{self.part}.{self.method}"

    def tests(self) -> list[str]:
        """The kit tests of the mutated method, those named with ``hint`` first, then the
        end-to-end ones."""
        own = EXERCISED[f"{CONTRACT[self.part].__name__}.{self.method}"]
        ordered = sorted(own, key=lambda test: self.hint not in test) if self.hint else own
        return list(dict.fromkeys([*ordered, *END_TO_END]))


def _mutants() -> list[Mutant]:
    found = [
        Mutant("stale revision", "sessions", "revision", _stale_revision),
        Mutant("read misses appended", "sessions", "load_since", _misses_appended),
        Mutant("stale revision", "sessions", "take_turn", _taken(_taken_stale)),
        Mutant("read misses appended", "sessions", "take_turn", _taken(_taken_misses_appended)),
        Mutant("pending turn hidden", "sessions", "take_turn", _taken(_taken_hides_pending)),
        Mutant("write skipped", "sessions", "take_turn", _taken(_taken_claims_saved)),
    ]
    writes = [
        ("sessions", "save"),
        ("sessions", "append"),
        ("sessions", "commit_turn"),
        ("checkpoints", "save"),
        ("checkpoints", "delete"),
        ("checkpoints", "save_and_delete"),
        ("approvals", "create"),
    ]
    found += [Mutant("write skipped", part, method, _skip_write) for part, method in writes]
    found += [
        Mutant("fence ignored", part, method, _rewrite(_drop_fence), "fence")
        for part, method in writes
        if (part, method) != ("sessions", "save")
    ]
    for method in ("append", *_COMMITS):
        found.append(
            Mutant("conflict swallowed", "sessions", method, _swallow_conflict, "conflict")
        )
        found.append(
            Mutant(
                "expected length ignored", "sessions", method, _rewrite(_ignore_length), "conflict"
            )
        )
    found.append(
        Mutant("checkpoints not deleted", "sessions", "commit_turn", _rewrite(_keep_checkpoints))
    )
    found.append(
        Mutant(
            "checkpoints not deleted", "checkpoints", "save_and_delete", _rewrite(_keep_checkpoints)
        )
    )
    found.append(
        Mutant("edited arguments dropped", "approvals", "resolve", _rewrite(_drop_arguments))
    )
    found += [
        Mutant(fault, "sessions", method, make, hint)
        for fault, method, make, hint in [*HISTORY_FAULTS, *STATE_FAULTS]
    ]
    return found


MUTANTS = _mutants()

#: (store, mutant name) -> why the fault does no harm there. Checked both ways: a listed
#: mutant the kit kills fails the test too. Empty today: every mutated method is on a
#: turn's path or called by admin and recovery even where the store keeps the default
#: (``load_since`` on memory, files, PostgreSQL and Redis, behind ``take_turn``;
#: ``save_and_delete`` outside SQLite), and the kit calls each directly.
HARMLESS: dict[tuple[str, str], str] = {}


def mutate(made: Any, mutant: Mutant) -> Any:
    """``made`` with its ``mutant.part``'s class swapped for a subclass with the faulty method."""
    part = getattr(store_parts(made), mutant.part)
    right = type(part)
    faulty = mutant.make(getattr(right, mutant.method))
    faulty.__name__ = mutant.method
    namespace = {"__slots__": (), "__module__": __name__, mutant.method: faulty}
    part.__class__ = type(f"Mutant{right.__name__}", (right,), namespace)
    return made


def mutant_kit(kit: type[StoreContractTests], mutant: Mutant) -> type[StoreContractTests]:
    """``kit`` whose stores carry ``mutant`` (not importable: no test in another process)."""

    def make_store(self: Any, tmp_path: Path) -> Any:
        return mutate(kit.make_store(self, tmp_path), mutant)

    def reopen_store(self: Any, tmp_path: Path) -> Any:
        return mutate(kit.reopen_store(self, tmp_path), mutant)

    namespace: dict[str, Any] = {"make_store": make_store}
    if kit.reopen_store is not StoreContractTests.reopen_store:
        namespace["reopen_store"] = reopen_store
    return type(f"Mutant{kit.__name__}", (kit,), namespace)


@attrs.frozen
class Store:
    name: str
    kit: type[StoreContractTests]
    cleanup: Callable[[Path], object] = lambda path: None


#: One schema for every PostgreSQL mutant test, emptied after each (migrating a new one
#: per test would take most of the time); dropped at the end.
SCHEMA = "t_mutants_" + secrets.token_hex(6)


class PostgresKit(kits.TestPostgresStore):
    """The PostgreSQL kit on ``SCHEMA`` (migrated once), whatever ``tmp_path`` is."""

    def make_store(self, tmp_path: Path) -> Any:
        return PostgresStore(postgres_url(), schema=SCHEMA, min_size=1, max_size=4, lease_ttl=2.0)

    def reopen_store(self, tmp_path: Path) -> Any:
        return self.make_store(tmp_path)


def empty_schema(_: Path) -> None:
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        conn.execute(
            f"TRUNCATE {SCHEMA}.sessions, {SCHEMA}.messages, {SCHEMA}.checkpoints, "
            f"{SCHEMA}.approvals, {SCHEMA}.leases"
        )


STORES = {
    "memory": Store("memory", kits.TestMemoryStore),
    "files": Store("files", kits.TestFileStore),
    "sqlite": Store("sqlite", kits.TestSqliteStore),
    "postgres": Store("postgres", PostgresKit, empty_schema),
    "redis": Store("redis", kits.TestRedisStore, lambda p: drop_prefix(prefix_for(p))),
    # an encrypting Redis store forks in scripts of its own (FORK_READ, then FORK_SEALED)
    "redis-encrypted": Store(
        "redis-encrypted", kits.TestEncryptedRedisStore, lambda p: drop_prefix(prefix_for(p))
    ),
}


def run_kit_test(store: Store, kit: type[Any], test: str, tmp: Path) -> str:
    """Run one kit test: ``"passed"``, ``"skipped"`` or ``"failed: <why>"`` (``"absent"``: the
    kit has no such test)."""
    method = getattr(kit(), test, None)
    if method is None:
        return "absent"
    try:
        method(tmp)
    except pytest.skip.Exception:
        return "skipped"
    except Exception as exc:  # a failed assertion or an error: the mutant is caught
        return f"failed: {type(exc).__name__}: {str(exc)[:200]}"
    finally:
        store.cleanup(tmp)
    return "passed"


def killer(store: Store, mutant: Mutant, fresh: Callable[[], Path]) -> str | None:
    """The kit test that fails on ``mutant`` of ``store`` (with why), or ``None``: it survived."""
    kit = mutant_kit(store.kit, mutant)
    for test in mutant.tests():
        outcome = run_kit_test(store, kit, test, fresh())
        if outcome.startswith("failed"):
            return f"{test} {outcome}"
    return None


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Callable[[], Path]]:
    counter = iter(range(10_000))

    def make() -> Path:
        path = tmp_path / f"t{next(counter)}"
        path.mkdir()
        return path

    yield make


def check_store(name: str, fresh: Callable[[], Path]) -> None:
    store = STORES[name]
    survivors, killed = {}, {}
    for mutant in MUTANTS:
        found = killer(store, mutant, fresh)
        if found is None:
            survivors[mutant.name] = "survived"
        else:
            killed[mutant.name] = found
    harmless = {m: why for (s, m), why in HARMLESS.items() if s == name}
    report = "\n".join(f"  {m}: {k}" for m, k in killed.items())
    print(f"{name}: {len(killed)} killed, {len(survivors)} harmless\n{report}")
    assert set(survivors) == set(harmless), (
        f"{name}: harmful mutants the kit did not kill: {sorted(set(survivors) - set(harmless))}; "
        f"listed as harmless but killed: {sorted(set(harmless) - set(survivors))}"
    )


@pytest.mark.parametrize("name", ["memory", "files", "sqlite"])
def test_every_harmful_mutant_is_killed(name: str, fresh: Callable[[], Path]) -> None:
    check_store(name, fresh)


def test_every_harmful_postgres_mutant_is_killed(fresh: Callable[[], Path]) -> None:
    require_postgres()
    try:
        check_store("postgres", fresh)
    finally:
        drop_schema(SCHEMA)


@pytest.mark.parametrize("name", ["redis", "redis-encrypted"])
def test_every_harmful_redis_mutant_is_killed(name: str, fresh: Callable[[], Path]) -> None:
    require_redis()
    check_store(name, fresh)


def test_a_mutant_is_the_store_with_one_method_swapped(tmp_path: Path) -> None:
    """The harness's own check: the mutant's part is the store's class but for one method,
    and the same store without the mutant passes the tests that kill it."""
    mutant = next(m for m in MUTANTS if m.method == "load_since")
    store = STORES["sqlite"]
    with opened(mutant_kit(store.kit, mutant)().make_store, tmp_path / "m") as parts:
        assert parts.sessions is not None
        right: Any = type(parts.sessions).__mro__[1]
        own = {key for key in vars(type(parts.sessions)) if not key.startswith("_")}
        assert own == {"load_since"}
        assert right.load_since is not type(parts.sessions).load_since
    (tmp_path / "r").mkdir()
    test = EXERCISED["BaseSessionStore.load_since"][0]
    assert run_kit_test(store, store.kit, test, tmp_path / "r") == "passed"


# -- the kit names what it does not exercise ------------------------------------------


def test_every_contract_method_has_kit_tests() -> None:
    for base in CONTRACT.values():
        for method in contract_methods(base):
            tests = EXERCISED.get(f"{base.__name__}.{method}")
            assert tests, f"{base.__name__}.{method}: no kit test is registered for it"
            for test in tests:
                assert callable(getattr(StoreContractTests, test, None)), (method, test)


def test_an_override_the_kit_does_not_exercise_is_named(tmp_path: Path) -> None:
    exercised = {k: v for k, v in EXERCISED.items() if k != "BaseSessionStore.load_since"}
    with opened(lambda p: SqliteStore(p / "store.db"), tmp_path) as parts:
        assert uncovered(parts, StoreContractTests) == []
        missing = uncovered(parts, StoreContractTests, exercised)
    assert len(missing) == 1 and missing[0].startswith("BaseSessionStore.load_since ")


# -- the three broken stores of issue 30 ------------------------------------------------

BROKEN = """

import attrs

from lousho_sessions.stores.base import AgentStore
from lousho_sessions.stores.memory import MemoryCheckpointStore, MemoryApprovalStore
from lousho_sessions.testing import StoreContractTests


class NothingNewStore(JsonDictSessionStore):
    def load_since(self, id, length, revision):
        return []  # "nothing new", always


class KeepsCheckpointsStore(JsonDictSessionStore):
    def commit_turn(self, request):
        self.append(
            request.id, request.messages, request.expected_length, fence=request.fence
        )  # forgets request.delete
        return self.revision(request.id)


class IgnoresLengthStore(JsonDictSessionStore):
    def commit_turn(self, request):
        stored = len(self.load(request.id) or [])  # expected_length ignored
        return super().commit_turn(attrs.evolve(request, expected_length=stored))


def parts(sessions):
    leases = sessions._local_leases()
    return AgentStore(
        sessions, MemoryCheckpointStore(leases=leases), MemoryApprovalStore(leases=leases)
    )


class TestReference(StoreContractTests):
    def make_store(self, tmp_path):
        return parts(JsonDictSessionStore())


class TestNothingNew(StoreContractTests):
    def make_store(self, tmp_path):
        return parts(NothingNewStore())


class TestKeepsCheckpoints(StoreContractTests):
    def make_store(self, tmp_path):
        return parts(KeepsCheckpointsStore())


class TestIgnoresLength(StoreContractTests):
    def make_store(self, tmp_path):
        return parts(IgnoresLengthStore())
"""


def test_the_three_broken_stores_of_the_issue_fail_the_kit(tmp_path: Path) -> None:
    """The docs' example store with one wrong fast-path override each fails the kit, run by
    pytest; the same store without the fault passes it."""
    doc = Path(__file__).parent.parent / "docs" / "writing-a-store.md"
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), flags=re.S)
    (store,) = [b for b in blocks if "class JsonDictSessionStore(BaseSessionStore)" in b]
    store = store.split("\nstore = JsonDictSessionStore()")[0]
    (tmp_path / "test_broken_stores.py").write_text(store + textwrap.dedent(BROKEN))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfs", "--tb=no"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    failed: dict[str, set[str]] = {}
    for line in result.stdout.splitlines():
        found = re.match(r"FAILED test_broken_stores\.py::(\w+)::(\w+)", line)
        if found:
            failed.setdefault(found[1], set()).add(found[2])
    assert "TestReference" not in failed, result.stdout
    assert {
        "test_load_since_returns_what_another_store_appended",
        "test_end_to_end_two_sessions_take_turns",
    } <= failed.get("TestNothingNew", set()), result.stdout
    assert {
        "test_commit_turn_commits_a_turn",
        "test_end_to_end_durable_turn_with_a_tool",
    } <= failed.get("TestKeepsCheckpoints", set()), result.stdout
    assert {
        "test_commit_turn_refuses_a_conflict",
        "test_revision_moves_with_commits_and_stays_otherwise",
    } <= failed.get("TestIgnoresLength", set()), result.stdout


def test_the_docs_contract_table_lists_every_method() -> None:
    """docs/writing-a-store.md's table of the contract has a row for every method of the three bases,
    saying whether it is required (abstract) and its default."""
    doc = (Path(__file__).parent.parent / "docs" / "writing-a-store.md").read_text(encoding="utf-8")
    rows = {
        found[1]: found[2]
        for found in re.finditer(r"^\| `([\w.]+)\(.*?\)` \| (yes|no) \|", doc, flags=re.M)
    }
    for base in CONTRACT.values():
        for method in contract_methods(base):
            key = method if base.__name__ == "BaseSessionStore" else f"{base.__name__}.{method}"
            assert key in rows, f"docs/writing-a-store.md: no row for {key}"
            required = method in getattr(base, "__abstractmethods__", ())
            assert rows[key] == ("yes" if required else "no"), key
