"""The ``make demo`` tour: ``python -m lousho_sessions.demo``.

Offline by default: the deterministic ``DemoProvider``, no key, no network. With
``LOUSHO_MODEL`` (other than ``"demo"``), ``OPENAI_API_KEY`` or
``ANTHROPIC_API_KEY`` set it tries the real model instead (best effort: if that
provider cannot be built it says so and stays offline).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping

from . import (
    Agent,
    AgentStore,
    DemoProvider,
    ExecutionResult,
    ProviderError,
    create_agent,
    file_store,
    tool,
)

__all__ = ["choose_model", "main", "make_agent", "tour"]


@tool
def get_weather(city: str) -> str:
    """Current weather for a city.

    Args:
        city: The city name, e.g. "Paris".
    """
    return f"Sunny and 22 C in {city}"


@tool(needs_approval=True)
def send_invoice(customer: str) -> str:
    """Email an invoice to a customer. A human must approve it first.

    Args:
        customer: Who gets the invoice.
    """
    return f"invoice sent to {customer}"


def choose_model(env: Mapping[str, str]) -> str | None:
    """The real model the environment names, or ``None`` for the offline demo."""
    model = env.get("LOUSHO_MODEL")
    if not model and env.get("OPENAI_API_KEY"):
        model = "openai/gpt-4o-mini"
    if not model and env.get("ANTHROPIC_API_KEY"):
        model = "anthropic/claude-3-5-haiku-latest"
    return None if not model or model == "demo" else model


def make_agent(model: str | None, store: AgentStore) -> tuple[Agent, str]:
    """The demo agent and a label for its model; falls back to ``DemoProvider`` when the
    real provider cannot be built (the tour must run offline)."""
    instructions = "You are a concise assistant."
    tools = [get_weather, send_invoice]
    if model is not None:
        try:
            return create_agent(instructions, model=model, tools=tools, store=store), model
        except Exception as exc:  # best effort: the offline tour still runs
            print(
                f"(cannot use {model!r}: {type(exc).__name__}: {exc}; using the offline DemoProvider)"
            )
    agent = create_agent(instructions, provider=DemoProvider(), tools=tools, store=store)
    return agent, "demo (offline DemoProvider)"


def section(title: str) -> None:
    print()
    print(f"== {title} ==")


def show(prompt: str, result: ExecutionResult) -> None:
    print(f"user:      {prompt}")
    print(f"assistant: {result.text}")


def main() -> int:
    model = choose_model(os.environ)
    if model is not None:
        try:
            return tour(model)
        except ProviderError as exc:  # no network, a bad key…: the offline tour still runs
            print(f"\n(the model call failed: {exc}; running the offline tour instead)\n")
    return tour(None)


def tour(model: str | None) -> int:
    """Run every section with ``model`` (``None``: the offline DemoProvider)."""
    with tempfile.TemporaryDirectory(prefix="lousho-demo-") as folder:
        # One store on disk, shared by two agent instances: transcripts, checkpoints, approvals.
        store = file_store(folder)
        agent, label = make_agent(model, store)
        print(f"lousho_sessions demo — model: {label}; store: file_store({folder!r})")
        try:
            return sections(agent, store)
        finally:
            agent.close()


def sections(agent: Agent, store: AgentStore) -> int:
    section("1. A session remembers across turns")
    session = agent.session("user-42")
    for prompt in ("My name is Ali.", "What is my name?"):
        show(prompt, session.send(prompt))
    print(f"(the transcript now holds {len(session.messages)} messages)")

    section("2. A second agent instance opens the same session id from the shared store")
    other = create_agent(provider=agent.provider, store=store)
    again = other.session("user-42")
    print(f"loaded {len(again.load())} messages for session {again.id!r}")
    show("What is my name?", again.send("What is my name?"))

    section("3. A streamed turn, printed as text deltas arrive")
    prompt = "Remind me: what is my name?"
    print(f"user:      {prompt}")
    print("assistant: ", end="")
    with session.stream(prompt) as run:
        for event in run:
            if event.type == "text.delta":
                print(event.text, end="|", flush=True)
    print()
    print(f"(finish_reason={run.result().finish_reason!r}; '|' marks each delta)")

    section("4. A tool call")
    prompt = "What's the weather in Paris?"
    print(f"user:      {prompt}")
    with session.stream(prompt) as run:
        for event in run:
            if event.type == "tool.call":
                print(f"tool call: {event.call.name}({dict(event.call.arguments)})")
            elif event.type == "tool.result":
                print(f"tool result: {event.output}")
    print(f"assistant: {run.result().text}")

    section("5. A tool that needs approval")
    prompt = "Please send_invoice to 'ACME Corp'."
    result = session.send(prompt)
    print(f"user:      {prompt}")
    print(f"finish_reason={result.finish_reason!r} approval_id={result.approval_id!r}")
    if result.approval_id is None:
        print("(the model did not call the tool; nothing to approve)")
    else:
        for request in agent.approvals.list(session_id=session.id):
            print(f"waiting for a human: {request.tool}({dict(request.call.arguments)})")
        finished = agent.approvals.resolve(id=result.approval_id, approved=True)
        print("approved with agent.approvals.resolve(id=..., approved=True)")
        if finished is not None:
            print(f"assistant: {finished.text}")

    section("Done")
    print(f"session {session.id!r} holds {len(session.load())} messages")
    other.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
