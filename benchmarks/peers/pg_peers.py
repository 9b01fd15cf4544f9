"""PostgreSQL peers for ``benchmarks/postgres_turns.py``, run by the peers' interpreter.

``<peers python> benchmarks/peers/pg_peers.py <postgresql url>`` answers the
requests of ``peer_protocol.py`` for two peers, each in a schema of its own on
the given database, dropped on ``close``:

- ``langgraph``: a ``StateGraph(MessagesState)`` with one node, a fake model that
  answers at once, compiled with LangGraph's ``PostgresSaver`` (connected as its
  ``from_conn_string`` does). A turn is one ``graph.invoke`` of the user message on
  the conversation's ``thread_id``. Seeding: one ``update_state`` with all messages.
- ``openai-sqlalchemy``: the OpenAI Agents SDK's ``SQLAlchemySession`` on an
  asyncpg engine. A turn is what ``Runner`` does with its session around a model
  call: ``get_items()``, then ``add_items([user, assistant])`` (no model, no agent
  loop: only the session's cost). Seeding: one ``add_items`` with all messages.

Set up with ``make peers`` (``benchmarks/peers/requirements.txt``).
"""

from __future__ import annotations

import asyncio
import secrets
import sys
from typing import Any

import psycopg
from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from peer_protocol import (
    REPLY_TEXT,
    USER_TEXT,
    Peer,
    history_texts,
    serve,
    timed,
    timed_async,
)
from psycopg.rows import dict_row
from sqlalchemy.ext.asyncio import create_async_engine

PACKAGES = [
    "langgraph",
    "langgraph-checkpoint-postgres",
    "openai-agents",
    "SQLAlchemy",
    "asyncpg",
    "psycopg",
]


def new_schema(url: str, name: str) -> str:
    schema = f"peer_{name}_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return schema


def drop_schema(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


class LangGraphPeer:
    def __init__(self, url: str) -> None:
        self.url = url
        self.schema = new_schema(url, "langgraph")
        # as PostgresSaver.from_conn_string connects, in a schema of its own
        self.conn = psycopg.connect(
            url,
            autocommit=True,
            prepare_threshold=0,
            row_factory=dict_row,
            options=f"-c search_path={self.schema}",
        )
        saver = PostgresSaver(self.conn)
        saver.setup()
        builder = StateGraph(MessagesState)
        builder.add_node("model", self.model)
        builder.add_edge(START, "model")
        builder.add_edge("model", END)
        self.graph = builder.compile(checkpointer=saver)
        self.count = 0

    @staticmethod
    def model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(REPLY_TEXT)]}

    @staticmethod
    def config(length: int) -> Any:
        return {"configurable": {"thread_id": f"len-{length}"}}

    def seed(self, length: int) -> None:
        messages = [
            HumanMessage(text) if role == "user" else AIMessage(text)
            for role, text in history_texts(length)
        ]
        self.graph.update_state(self.config(length), {"messages": messages}, as_node="model")

    def turns(self, length: int, n: int) -> list[float]:
        config = self.config(length)

        def turn() -> object:
            self.count += 1
            return self.graph.invoke(
                {"messages": [HumanMessage(USER_TEXT.format(n=self.count))]}, config
            )

        return timed(turn, n)

    def close(self) -> None:
        self.conn.close()
        drop_schema(self.url, self.schema)


class SqlAlchemyPeer:
    def __init__(self, url: str) -> None:
        self.url = url
        self.schema = new_schema(url, "sqlalchemy")
        self.loop = asyncio.new_event_loop()
        self.engine = create_async_engine(
            "postgresql+asyncpg://" + url.split("://", 1)[1],
            connect_args={"server_settings": {"search_path": self.schema}},
        )
        self.sessions: dict[int, Any] = {}
        self.count = 0

    def session(self, length: int) -> Any:
        if length not in self.sessions:
            self.sessions[length] = SQLAlchemySession(
                f"len-{length}", engine=self.engine, create_tables=True
            )
        return self.sessions[length]

    @staticmethod
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

    def seed(self, length: int) -> None:
        items = [self.item(role, text) for role, text in history_texts(length)]
        self.loop.run_until_complete(self.session(length).add_items(items))

    def turns(self, length: int, n: int) -> list[float]:
        session = self.session(length)

        async def turn() -> None:
            self.count += 1
            await session.get_items()
            await session.add_items(
                [
                    self.item("user", USER_TEXT.format(n=self.count)),
                    self.item("assistant", REPLY_TEXT),
                ]
            )

        return self.loop.run_until_complete(timed_async(turn, n))

    def close(self) -> None:
        self.loop.run_until_complete(self.engine.dispose())
        self.loop.close()
        drop_schema(self.url, self.schema)


def main() -> None:
    url = sys.argv[1]
    peers: dict[str, Peer] = {}
    try:
        peers["langgraph"] = LangGraphPeer(url)
        peers["openai-sqlalchemy"] = SqlAlchemyPeer(url)
    except BaseException:
        for peer in peers.values():
            peer.close()
        raise
    serve(peers, PACKAGES)


if __name__ == "__main__":
    main()
