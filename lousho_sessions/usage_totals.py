"""What a stored transcript spent: ``transcript_usage`` and the SQL that sums it in a database.

A transcript's spend is the ``usage`` of its assistant messages plus, on a compaction
summary (a message whose ``metadata["lousho.summary"]`` holds ``usage``), the spend of the
messages it replaced — the same count session budgets use. SQLite and PostgreSQL sum it
over the stored JSON in one query (``sqlite_usage_sql``, ``postgres_usage_sql``); other
stores load the messages and call ``transcript_usage``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .messages import Message, Usage

__all__ = [
    "SUMMARY_KEY",
    "USAGE_FIELDS",
    "postgres_usage_sql",
    "sqlite_usage_sql",
    "transcript_usage",
    "usage_from_row",
]

#: the metadata key of a compaction summary (``compaction.SUMMARY_KEY``)
SUMMARY_KEY = "lousho.summary"
#: ``Usage``'s counted fields, in the order the SQL queries give them
USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)


def _carried(metadata: Mapping[str, Any]) -> Usage:
    """The spend a summary's metadata carries; nothing for anything else."""
    summary = metadata.get(SUMMARY_KEY)
    usage = summary.get("usage") if isinstance(summary, Mapping) else None
    if not isinstance(usage, Mapping):
        return Usage()
    values = [usage.get(name, 0) for name in USAGE_FIELDS]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return Usage()
    return usage_from_row(values)


def transcript_usage(messages: Iterable[Message]) -> Usage:
    """The spend of ``messages``: their assistant messages' usage and what summaries carry."""
    total = Usage()
    for message in messages:
        if message.role == "assistant":
            if message.usage is not None:
                total = total + message.usage
        elif message.metadata:
            total = total + _carried(message.metadata)
    return total


def usage_from_row(row: Sequence[Any]) -> Usage:
    """A ``Usage`` from the sums in ``USAGE_FIELDS`` order (``None`` counts 0)."""
    tokens_in, tokens_out, cost, read, write, reasoning = (v or 0 for v in row)
    return Usage(
        int(tokens_in),
        int(tokens_out),
        float(cost),
        cache_read_tokens=int(read),
        cache_write_tokens=int(write),
        reasoning_tokens=int(reasoning),
    )


def sqlite_usage_sql(column: str) -> str:
    """The select list summing ``USAGE_FIELDS`` over message JSON in ``column`` (SQLite)."""
    sums = []
    for name in USAGE_FIELDS:
        own = f"json_extract({column}, '$.usage.{name}')"
        carried = f"json_extract({column}, '$.metadata.\"{SUMMARY_KEY}\".usage.{name}')"
        kind = "TOTAL" if name == "cost_usd" else "SUM"
        sums.append(
            f"{kind}(CASE WHEN json_extract({column}, '$.role') = 'assistant' "
            f"THEN {own} ELSE {carried} END)"
        )
    return ", ".join(sums)


def postgres_usage_sql(column: str) -> str:
    """The select list summing ``USAGE_FIELDS`` over message JSON in ``column`` (PostgreSQL)."""
    sums = []
    for name in USAGE_FIELDS:
        cast = "float8" if name == "cost_usd" else "bigint"
        own = f"({column} -> 'usage' ->> '{name}')::{cast}"
        carried = f"({column} -> 'metadata' -> '{SUMMARY_KEY}' -> 'usage' ->> '{name}')::{cast}"
        sums.append(
            f"sum(CASE WHEN {column} ->> 'role' = 'assistant' THEN {own} ELSE {carried} END)"
        )
    return ", ".join(sums)
