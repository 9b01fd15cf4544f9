"""Tools: ``@tool`` turns a typed function (plain or ``async def``) into something a model can call.

The JSON schema comes from the type hints (``_schema``), a model's arguments are
checked against them before the function runs (``_arguments``); ``_tool`` holds
``Tool``, ``ToolContext`` and ``@tool``.
"""

from ._tool import (
    Tool,
    ToolContext,
    ToolLoop,
    ToolSpec,
    as_tool,
    json_schema,
    tool,
    tool_error_text,
)

__all__ = [
    "Tool",
    "ToolContext",
    "ToolLoop",
    "ToolSpec",
    "as_tool",
    "json_schema",
    "tool",
    "tool_error_text",
]
