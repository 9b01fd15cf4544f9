"""Tool exceptions are visible (issue 11.4): logged, on the event, or ending the turn."""

from __future__ import annotations

import logging
import pathlib

import pytest
from helpers import calls

from lousho_sessions import (
    FileCheckpointStore,
    PropagatingToolError,
    ScriptedProvider,
    create_agent,
    tool,
)
from lousho_sessions.events import ToolResultEvent


class BackendDown(Exception):
    pass


@tool
def fetch(url: str) -> str:
    """Fetch a URL."""
    raise BackendDown(f"cannot reach {url}")


def test_tool_exception_is_logged_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    provider = ScriptedProvider([calls(("fetch", {"url": "http://x"})), "recovered"])
    with caplog.at_level(logging.WARNING, logger="lousho_sessions.tools"):
        result = create_agent(provider=provider, tools=[fetch]).session().send("go")
    assert result.text == "recovered"
    (record,) = [r for r in caplog.records if r.name == "lousho_sessions.tools"]
    assert record.levelno == logging.WARNING
    assert "tool 'fetch' (call c0" in record.getMessage() and "BackendDown" in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], BackendDown)
    assert "raise BackendDown" in caplog.text  # the traceback is in the log


def test_the_exception_is_on_the_tool_result_event() -> None:
    provider = ScriptedProvider([calls(("fetch", {"url": "http://x"})), "recovered"])
    run = create_agent(provider=provider, tools=[fetch]).session().stream("go")
    (event,) = [e for e in run if isinstance(e, ToolResultEvent)]
    assert run.result().text == "recovered"
    assert event.is_error and event.output == "Error: BackendDown: cannot reach http://x"
    assert isinstance(event.exception, BackendDown)
    assert event.exception.__traceback__ is not None
    # not part of equality: events compare by what was said, not by the exception object
    assert event == ToolResultEvent(event.run_id, "c0", event.output, True)


def test_successful_result_has_no_exception() -> None:
    @tool
    def ok() -> str:
        """Ok."""
        return "fine"

    provider = ScriptedProvider([calls(("ok", {})), "done"])
    run = create_agent(provider=provider, tools=[ok]).session().stream("go")
    (event,) = [e for e in run if isinstance(e, ToolResultEvent)]
    assert not event.is_error and event.exception is None


def test_raise_errors_ends_the_turn_and_keeps_the_transcript(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[str] = []

    @tool(raise_errors=True)
    def charge(amount: int) -> str:
        """Charge a card."""
        ran.append("charge")
        raise BackendDown("card service down")

    provider = ScriptedProvider([calls(("charge", {"amount": 5})), "never"])
    session = create_agent(provider=provider, tools=[charge]).session()
    with (
        caplog.at_level(logging.WARNING, logger="lousho_sessions.tools"),
        pytest.raises(PropagatingToolError, match="tool 'charge' raised BackendDown") as info,
    ):
        session.send("pay 5")
    assert isinstance(info.value.__cause__, BackendDown)
    # it reaches the caller, so it is not logged as well
    assert not [r for r in caplog.records if r.name == "lousho_sessions.tools"]
    assert ran == ["charge"] and session.load() == ()
    assert len(provider.calls) == 1  # the model was not told


def test_raise_errors_with_a_checkpoint_store_keeps_the_turn_pending(
    tmp_path: pathlib.Path,
) -> None:
    @tool(raise_errors=True)
    def charge(amount: int) -> str:
        """Charge a card."""
        raise BackendDown("card service down")

    provider = ScriptedProvider([calls(("charge", {"amount": 5})), "never"])
    checkpoints = FileCheckpointStore(str(tmp_path))
    session = create_agent(provider=provider, tools=[charge]).session(
        "pay-1", checkpoint_store=checkpoints
    )
    with pytest.raises(PropagatingToolError):
        session.send("pay 5")
    assert session.load() == () and session.pending() is not None


def test_raise_errors_does_not_apply_to_bad_arguments() -> None:
    @tool(raise_errors=True)
    def charge(amount: int) -> str:
        """Charge a card."""
        return "charged"

    provider = ScriptedProvider([calls(("charge", {"amount": "five"})), "asked again"])
    result = create_agent(provider=provider, tools=[charge]).session().send("pay")
    assert result.text == "asked again"
