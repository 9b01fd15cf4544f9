"""A worker process for the durable thinking tests: an agent with tools and extended thinking
on ``AnthropicProvider``, its session in the store at a URL.

``python thinking_worker.py turn URL BASE_URL LOG`` starts the turn of session "trip" (the
test kills it); ``python thinking_worker.py resume URL BASE_URL LOG`` finishes it in this
new process and prints ``{"text", "reasoning"}`` as JSON. Every tool run is appended to
``LOG``, so the test counts what ran in both processes.
"""

from __future__ import annotations

import json
import sys

from lousho_sessions import ReasoningPart, create_agent, open_store, tool
from lousho_sessions.providers import RetryPolicy
from lousho_sessions.providers.anthropic import AnthropicProvider

THINKING = {"type": "enabled", "budget_tokens": 2048}


def main(mode: str, url: str, base_url: str, logfile: str) -> None:
    def ran(line: str) -> None:
        with open(logfile, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        ran(f"get_weather {city}")
        return {"Paris": "18C", "Lyon": "16C"}.get(city, "unknown")

    @tool
    def get_time(zone: str) -> str:
        """The time in a time zone."""
        ran(f"get_time {zone}")
        return f"12:00 in {zone}"

    provider = AnthropicProvider(
        "claude-test",
        api_key="sk-ant-test-worker-5e1c",
        base_url=base_url,
        retry=RetryPolicy(max_retries=0),
        timeout=(5.0, 60.0),
    )
    agent = create_agent(
        provider=provider,
        tools=[get_weather, get_time],
        store=open_store(url),
        settings={"thinking": THINKING},
    )
    session = agent.session("trip")
    if mode == "turn":
        session.send("Weather and time in Paris, and Lyon?")
        raise SystemExit("the test should have killed this process")
    result = session.resume()
    assert result is not None, "nothing to resume"
    reasoning = [
        [p.signature or p.data for p in m.content if isinstance(p, ReasoningPart)]
        for m in session.load()
        if m.role == "assistant"
    ]
    print(json.dumps({"text": result.text, "reasoning": reasoning}))
    agent.close()


if __name__ == "__main__":
    main(*sys.argv[1:5])
