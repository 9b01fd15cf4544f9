"""Ids from the pool of OS randomness (``_random``): the form of ``uuid.uuid4().hex``, never
repeated however many the pool hands out, and never the same in a forked child as in its
parent (the child starts with an empty pool)."""

from __future__ import annotations

import os
import threading
import uuid

from helpers import needs

from lousho_sessions import Message, _random


def test_ids_have_the_form_of_uuid4_hex_and_never_repeat_across_refills() -> None:
    ids = [_random.uuid4_hex() for _ in range(3 * _random._POOL_SIZE // 16 + 7)]
    assert len(set(ids)) == len(ids)
    for value in ids[:50]:
        parsed = uuid.UUID(hex=value)
        assert parsed.hex == value and parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_threads_taking_ids_at_once_get_distinct_ones() -> None:
    start = threading.Barrier(4)
    taken: list[list[str]] = [[] for _ in range(4)]

    def take(mine: list[str]) -> None:
        start.wait(10)
        mine.extend(_random.uuid4_hex() for _ in range(2000))

    threads = [threading.Thread(target=take, args=(mine,)) for mine in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    every = [value for mine in taken for value in mine]
    assert len(every) == 8000 and len(set(every)) == 8000


def test_messages_take_their_ids_from_the_pool() -> None:
    """A pool of zeros shows where a message's id came from."""
    with _random._lock:
        _random._pool, _random._at = bytes(_random._POOL_SIZE), 0
    try:
        assert Message.user("a").id == "00000000000040008000000000000000"
    finally:
        with _random._lock:
            _random._pool, _random._at = b"", 0  # the next id refills from the OS
    assert Message.user("b").id != "00000000000040008000000000000000"


def test_a_forked_child_hands_out_other_ids_than_its_parent() -> None:
    needs(hasattr(os, "fork"), "needs os.fork")
    _random.uuid4_hex()  # the pool holds unused bytes now, which the child must not reuse
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, then out at once
        try:
            os.write(writer, " ".join(_random.uuid4_hex() for _ in range(100)).encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        child = set(pipe.read().split())
    os.waitpid(pid, 0)
    parent = {_random.uuid4_hex() for _ in range(100)}
    assert len(child) == 100
    assert not child & parent
