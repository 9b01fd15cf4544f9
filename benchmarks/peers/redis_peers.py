"""The Redis peer for ``benchmarks/redis_turns.py``, run by the peers' interpreter.

``<peers python> benchmarks/peers/redis_peers.py <redis url>`` answers the
requests of ``peer_protocol.py`` for one peer:

- ``openai-redis``: the OpenAI Agents SDK's ``RedisSession`` (``redis.asyncio``
  client from its ``from_url``) under a key prefix of its own, whose keys are
  deleted on ``close``. A turn is what ``Runner`` does with its session around a
  model call: ``get_items()``, then ``add_items([user, assistant])``. Seeding:
  one ``add_items`` with all messages.

Set up with ``make peers`` (``benchmarks/peers/requirements.txt``).
"""

from __future__ import annotations

import asyncio
import secrets
import sys
from typing import Any

import redis
from agents.extensions.memory.redis_session import RedisSession
from peer_protocol import REPLY_TEXT, USER_TEXT, Peer, history_texts, serve, timed_async

PACKAGES = ["openai-agents", "redis"]


def item(role: str, text: str) -> dict[str, Any]:
    """A user input item, or an assistant message as a ``Runner`` stores a model's output."""
    if role == "user":
        return {"role": "user", "content": text}
    return {
        "id": "msg_" + secrets.token_hex(8),
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


class RedisSessionPeer:
    def __init__(self, url: str) -> None:
        self.url = url
        self.prefix = f"peer-openai-{secrets.token_hex(4)}"
        self.loop = asyncio.new_event_loop()
        self.sessions: dict[int, Any] = {}
        self.count = 0

    def session(self, length: int) -> Any:
        if length not in self.sessions:
            self.sessions[length] = RedisSession.from_url(
                f"len-{length}", url=self.url, key_prefix=self.prefix
            )
        return self.sessions[length]

    def seed(self, length: int) -> None:
        items = [item(role, text) for role, text in history_texts(length)]
        self.loop.run_until_complete(self.session(length).add_items(items))

    def turns(self, length: int, n: int) -> list[float]:
        session = self.session(length)

        async def turn() -> None:
            self.count += 1
            await session.get_items()
            await session.add_items(
                [item("user", USER_TEXT.format(n=self.count)), item("assistant", REPLY_TEXT)]
            )

        return self.loop.run_until_complete(timed_async(turn, n))

    def close(self) -> None:
        for session in self.sessions.values():
            self.loop.run_until_complete(session.close())
        self.loop.close()
        with redis.Redis.from_url(self.url) as client:
            keys = list(client.scan_iter(match=f"{self.prefix}:*", count=1000))
            if keys:
                client.unlink(*keys)


def main() -> None:
    peers: dict[str, Peer] = {"openai-redis": RedisSessionPeer(sys.argv[1])}
    serve(peers, PACKAGES)


if __name__ == "__main__":
    main()
