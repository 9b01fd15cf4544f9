"""``open_store(url)``, ``create_agent(store=url)`` and ``LOUSHO_STORE`` (issue 17 item 3)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from services_pg import drop_schema, postgres_url, require_postgres
from services_redis import drop_prefix, redis_url, require_redis

from lousho_sessions import (
    Message,
    StoreClosedError,
    StoreError,
    create_agent,
    open_store,
)
from lousho_sessions.stores.files import FileStore
from lousho_sessions.stores.memory import MemoryStore
from lousho_sessions.stores.urls import StoreURLError, URLStore, redacted_url


def _roundtrip(store: URLStore) -> None:
    assert store.sessions is not None
    store.sessions.save("s1", [Message.user("hi")])
    loaded = store.sessions.load("s1")
    assert loaded is not None and loaded[0].text == "hi"


def test_memory() -> None:
    store = open_store("memory:")
    assert store.kind == "memory" and isinstance(store.backend, MemoryStore)
    assert store.sessions is store.backend.sessions
    _roundtrip(store)
    assert open_store("memory:").sessions.load("s1") is None  # type: ignore[union-attr]


def test_file_absolute_and_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absolute = open_store(f"file://{tmp_path}/abs")
    assert absolute.kind == "file" and isinstance(absolute.backend, FileStore)
    _roundtrip(absolute)
    assert (tmp_path / "abs" / "s1.json").is_file()
    monkeypatch.chdir(tmp_path)
    _roundtrip(open_store("file:rel/dir"))
    assert (tmp_path / "rel" / "dir" / "s1.json").is_file()
    _roundtrip(open_store(f"file://localhost{tmp_path}/local"))
    assert (tmp_path / "local" / "s1.json").is_file()


def test_sqlite_paths_and_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lousho_sessions.sqlite import SqliteStore

    monkeypatch.chdir(tmp_path)
    with open_store("sqlite:///rel/app.db?synchronous=full&mode=640") as rel:
        assert isinstance(rel.backend, SqliteStore)
        assert rel.backend.path == str(tmp_path / "rel" / "app.db")
        assert rel.backend.synchronous == "FULL"
        _roundtrip(rel)
    assert stat.S_IMODE(os.stat(tmp_path / "rel" / "app.db").st_mode) == 0o640
    with pytest.raises(StoreClosedError):  # the with block closed it
        rel.sessions.load("s1")  # type: ignore[union-attr]
    with open_store(f"sqlite:///{tmp_path}/abs.db") as absolute:  # four slashes in all
        assert absolute.backend.path == str(tmp_path / "abs.db")
        _roundtrip(absolute)
    with open_store("sqlite:///:memory:") as memory:
        assert memory.backend.path == ":memory:"
        _roundtrip(memory)


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("mysql://u:pw@host/db", ["unknown store URL", "mysql://u:***@host/db", "sqlite:///"]),
        ("", ["non-empty"]),
        ("memory:?x=1", ["takes no options", "x"]),
        ("memory:somewhere", ["takes no path"]),
        ("file://otherhost/dir", ["no host", "file:///dir"]),
        ("file:", ["no directory"]),
        ("sqlite://host/x.db", ["has no host", "sqlite:////absolute"]),
        ("sqlite:", ["no database path"]),
        ("sqlite:///x.db?synchronous=SOMETIMES", ["synchronous must be one of"]),
        ("sqlite:///x.db?mode=rw", ["mode='rw'", "integer"]),
        ("sqlite:///x.db?journal=wal", ["takes no options", "journal"]),
        ("postgresql://u:secret@127.0.0.1/db?lease_ttl=soon", ["lease_ttl='soon'", "***"]),
        ("postgres://u:secret@127.0.0.1/db?notify=maybe", ["notify='maybe'", "true or false"]),
        ("redis://:secret@127.0.0.1:6379/0?ttl=long", ["ttl='long'", "redis://:***@"]),
        ("redis://127.0.0.1:6379/0?prefix=a%20b", ["prefix must be"]),
    ],
)
def test_bad_urls_name_what_is_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, words: Sequence[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreURLError) as caught:
        open_store(url)
    message = str(caught.value)
    for word in words:
        assert word in message
    assert "secret" not in message
    assert isinstance(caught.value, ValueError)


def test_redacted_url() -> None:
    assert redacted_url("postgresql://app:p%40ss@db:5432/x?sslmode=require") == (
        "postgresql://app:***@db:5432/x?sslmode=require"
    )
    assert redacted_url("redis://:pw@h:6379/0") == "redis://:***@h:6379/0"
    assert (
        redacted_url("postgresql://h/x?user=a&password=pw")
        == "postgresql://h/x?user=a&password=***"
    )
    assert redacted_url("sqlite:///:memory:") == "sqlite:///:memory:"
    assert redacted_url("postgresql://app@db/x") == "postgresql://app@db/x"


def test_passwords_with_raw_at_signs_and_ssl_passwords_are_masked() -> None:
    """A raw ``@`` in a password: the user info ends at the last ``@`` (as the drivers read
    it), so nothing of the password is left in ``store.url`` or ``doctor``'s output."""
    assert redacted_url("redis://:p@ss@h:6379/0") == "redis://:***@h:6379/0"
    assert redacted_url("postgresql://app:a@b@c@db/x") == "postgresql://app:***@db/x"
    assert (
        redacted_url("postgresql://h/x?sslmode=require&sslpassword=keypass&password=pw")
        == "postgresql://h/x?sslmode=require&sslpassword=***&password=***"
    )


def test_a_redis_url_with_a_raw_at_in_its_password_keeps_it_out_of_store_url() -> None:
    require_redis()
    host = redis_url().split("://", 1)[1].split("/", 1)[0].rpartition("@")[2]
    store = open_store(f"redis://:tail@secret@{host}/0?prefix=t-urls-{os.urandom(4).hex()}")
    try:
        assert store.url.startswith("redis://:***@") and "secret" not in store.url
        assert "secret" not in repr(store) and "secret" not in store.backend.where
    finally:
        store.close()


def test_a_percent_in_a_postgres_password_stays_out_of_the_error() -> None:
    """libpq copies a password it cannot percent-decode into its error: the store's error
    (and the errors it was raised from) must not show it."""
    require_postgres()
    with pytest.raises(StoreError) as caught:
        open_store("postgresql://app:top%zzsecret@127.0.0.1:5432/test?connect_timeout=5")
    seen: BaseException | None = caught.value
    while seen is not None:
        assert "top%zzsecret" not in str(seen) and "zzsecret" not in str(seen), repr(seen)
        seen = seen.__cause__ or seen.__context__
    assert "app:***@127.0.0.1" in str(caught.value)


def test_postgres_url_options_reach_libpq_with_their_spaces() -> None:
    """``options=-c%20statement_timeout%3D5000``: re-encoding it made ``-c+statement...``,
    which libpq reads with a plus and refuses (or misreads)."""
    require_postgres()
    url = postgres_url()
    sep = "&" if "?" in url else "?"
    schema = "t_urls_" + os.urandom(4).hex()
    try:
        with (
            open_store(f"{url}{sep}schema={schema}&options=-c%20statement_timeout%3D5000") as store,
            store.backend._pool.connection() as conn,
        ):
            assert conn.execute("SHOW statement_timeout").fetchone() == ("5s",)
    finally:
        drop_schema(schema)


@pytest.mark.parametrize("url", ["redis://[bad/0", "postgresql://[::1/x"])
def test_a_malformed_url_is_a_url_error(url: str) -> None:
    with pytest.raises(StoreURLError, match="malformed store URL"):
        open_store(url)


def test_unreachable_server_error_names_the_url_not_the_password() -> None:
    with pytest.raises(StoreError) as caught:
        open_store("postgresql://app:topsecret@127.0.0.1:1/db?connect_timeout=2")
    assert "postgresql://app:***@127.0.0.1:1/db" in str(caught.value)
    assert "topsecret" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "module", "extra"),
    [("postgresql://h/db", "psycopg", "postgres"), ("redis://h:6379/0", "redis", "redis")],
)
def test_missing_extra_is_named(url: str, module: str, extra: str) -> None:
    code = (
        "import sys\n"
        f"sys.modules[{module!r}] = None  # as if the extra were not installed\n"
        "from lousho_sessions import open_store\n"
        "from lousho_sessions.stores.urls import StoreURLError\n"
        "try:\n"
        f"    open_store({url!r})\n"
        "except StoreURLError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert f"pip install 'lousho-sessions[{extra}]'" in out.stdout


def test_root_import_stays_lean_until_a_url_needs_a_driver() -> None:
    code = (
        "import sys\n"
        "import lousho_sessions\n"
        "lousho_sessions.open_store('memory:')\n"
        "bad = [m for m in ('sqlite3', 'redis', 'psycopg') if m in sys.modules]\n"
        "assert not bad, bad\n"
        "lousho_sessions.open_store('sqlite:///:memory:')\n"
        "assert 'sqlite3' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.fixture
def pg_schema() -> Iterator[str]:
    require_postgres()
    schema = "t_urls_" + os.urandom(4).hex()
    try:
        yield schema
    finally:
        drop_schema(schema)


def test_postgres_url_options(pg_schema: str) -> None:
    from lousho_sessions.postgres import PostgresStore

    url = postgres_url()
    sep = "&" if "?" in url else "?"
    with open_store(f"{url}{sep}schema={pg_schema}&lease_ttl=7&notify=false&max_size=2") as store:
        assert store.kind == "postgresql" and isinstance(store.backend, PostgresStore)
        assert (store.backend.schema, store.backend.lease_ttl) == (pg_schema, 7.0)
        assert store.backend.notify is False
        _roundtrip(store)
    assert store.backend.closed
    short = url.replace("postgresql://", "postgres://", 1)
    with open_store(f"{short}{sep}schema={pg_schema}") as again:
        assert again.sessions.load("s1") is not None  # type: ignore[union-attr]


def test_redis_url_options() -> None:
    from lousho_sessions.redis import RedisStore

    require_redis()
    prefix = "lousho-test-urls-" + os.urandom(4).hex()
    url = redis_url()
    sep = "&" if "?" in url else "?"
    try:
        with open_store(f"{url}{sep}prefix={prefix}&lease_ttl=5&ttl=3600") as store:
            assert store.kind == "redis" and isinstance(store.backend, RedisStore)
            assert (store.backend.prefix, store.backend.lease_ttl) == (prefix, 5.0)
            assert store.backend.ttl == 3600.0
            _roundtrip(store)
        assert store.backend.closed
    finally:
        drop_prefix(prefix)


def test_create_agent_with_a_url_and_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/agent.db"
    agent = create_agent(store=url)
    assert agent.session("u1").send("My name is Ali.").finish_reason == "stop"
    agent.close()
    store = agent.config.opened_store
    assert store is not None and store.backend.closed  # the agent opened it, so it closed it
    monkeypatch.setenv("LOUSHO_STORE", url)
    with create_agent() as again:
        assert again.session("u1").send("What is my name?").text.endswith("Ali.")
    monkeypatch.setenv("LOUSHO_STORE", "nosuch://x")
    with pytest.raises(StoreURLError, match=r"^LOUSHO_STORE: unknown store URL 'nosuch://x'"):
        create_agent()
    monkeypatch.setenv("LOUSHO_STORE", "")
    with create_agent() as memory_agent:  # empty: the agent's own memory store
        assert memory_agent.config.opened_store is None


def test_a_given_store_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOUSHO_STORE", "sqlite:///:memory:")
    mine = open_store("memory:")
    with create_agent(store=mine) as agent:
        assert agent.config.opened_store is None
        agent.session("u1").send("hi")
    assert mine.sessions.load("u1") is not None  # type: ignore[union-attr]


def test_adapter_lists_a_plain_stores_sessions() -> None:
    from lousho_sessions.stores.adapters import adapt_sessions

    class Plain:
        def __init__(self) -> None:
            self.data: dict[str, list[Message]] = {}

        def load(self, id: str) -> list[Message] | None:
            return self.data.get(id)

        def save(self, id: str, messages: Sequence[Message]) -> None:
            self.data[id] = list(messages)

        def delete(self, id: str) -> None:
            self.data.pop(id, None)

    class Listing(Plain):
        def list_ids(self) -> list[str]:
            return list(self.data)

    plain = adapt_sessions(Plain())
    with pytest.raises(NotImplementedError, match="list_ids"):
        plain.list_ids()
    listing = adapt_sessions(Listing())
    listing.save("b", [Message.user("x")])
    listing.save("a", [])
    assert listing.list_ids() == ["a", "b"]
    info = listing.info("b")
    assert info is not None and (info.messages, info.updated_at) == (1, None)
