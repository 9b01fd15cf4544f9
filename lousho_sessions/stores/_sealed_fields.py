"""What a sealed record keeps in clear, and the text form's envelope (``stores._sealing``).

A message keeps in clear its ``id``, ``role``, ``created_at`` and usage (``usage``, and a
compaction summary's ``metadata["lousho.summary"].usage``), so the SQL usage totals and
server-side id lookups work unchanged. In text form a checkpoint or approval keeps the
fields servers and sweeps read (``CHECKPOINT_CLEAR``, ``APPROVAL_CLEAR``). The text form is
a JSON object, the token first: ``{"lousho.sealed": "<token>", <clear fields>}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._message_codec import _MESSAGE_FIELDS
from ..errors import StoreCorruptError
from ..serde import to_json
from ..usage_totals import SUMMARY_KEY, USAGE_FIELDS

__all__ = [
    "APPROVAL_CLEAR",
    "CHECKPOINT_CLEAR",
    "SEALED_KEY",
    "SEALED_PREFIX",
    "dict_clear",
    "envelope",
    "message_clear",
    "sealed_key_id",
    "token_of",
]

#: The key of a sealed record's token.
SEALED_KEY = "lousho.sealed"
#: How every sealed record's text starts (the token is written first).
SEALED_PREFIX = '{"' + SEALED_KEY + '":"'

#: The checkpoint fields kept in clear: what sweeps and servers read (``pending_fields``).
CHECKPOINT_CLEAR = frozenset(
    {
        "format",
        "version",
        "run_id",
        "session_id",
        "turn_id",
        "base_length",
        "status",
        "approval_id",
        "steps",
        "created_at",
        "updated_at",
        "attempts",
        "fence",
    }
)
#: The approval record fields kept in clear: what listing, resolving and pruning read.
APPROVAL_CLEAR = frozenset(
    {"id", "session_id", "turn_id", "run_id", "status", "created_at", "resolved_at"}
)


def sealed_key_id(text: str) -> str | None:
    """The key id a stored text record was sealed with; ``None`` for a clear record."""
    if not text.startswith(SEALED_PREFIX):
        return None
    token = text[len(SEALED_PREFIX) : text.find('"', len(SEALED_PREFIX))]
    parts = token.split(".", 2)
    return parts[1] if len(parts) == 3 else ""


def envelope(token: str, clear: str) -> str:
    """``{"lousho.sealed": token, **clear}`` (``clear``: a JSON object's text), the token
    first (``SEALED_PREFIX``)."""
    if len(clear) > 2:
        return f'{SEALED_PREFIX}{token}",{clear[1:]}'
    return f'{SEALED_PREFIX}{token}"}}'


def token_of(text: str, source: str) -> str:
    """The token of a sealed record's text."""
    end = text.find('"', len(SEALED_PREFIX))
    if end < 0:
        raise StoreCorruptError(f"{source}: a sealed message without its token's end")
    return text[len(SEALED_PREFIX) : end]


def message_clear(data: Mapping[str, Any], text: str) -> str:
    """The JSON object of a message's clear fields. ``data``: the message's dict; ``text``:
    its JSON (so nothing in it is NaN or unencodable).

    A message in the codec's shape (its keys in ``MESSAGE_KEYS`` order, no metadata, usage
    none or ``Usage``'s own numbers) has its clear fields cut out of ``text``, not encoded
    again: ``{"role":R`` before ``,"content":``, then from the one top-level ``,"usage":``
    (nothing after it holds that text unescaped) up to ``,"metadata":{}}``.
    """
    usage = data.get("usage")
    if (
        tuple(data) == MESSAGE_KEYS
        and data["metadata"] == {}
        and (usage is None or (type(usage) is dict and _USAGE_KEYS.issuperset(usage)))
        and text.endswith(_METADATA_END)
    ):
        role_end = text.find(',"content":')
        usage_start = text.rfind(',"usage":')
        return text[:role_end] + text[usage_start : -len(_METADATA_END)] + "}"
    return to_json(dict_clear(data), what="sealed record")


#: The keys of a message's dict as the codec writes it (``serde.message_to_dict``).
MESSAGE_KEYS = tuple(key for key in _MESSAGE_FIELDS if key != "extra")
#: The keys a ``Usage`` is written with (numbers all).
_USAGE_KEYS = frozenset(USAGE_FIELDS)
_METADATA_END = ',"metadata":{}}'


def dict_clear(data: Mapping[str, Any]) -> dict[str, Any]:
    """The clear fields of a message's dict."""
    clear = {key: data[key] for key in ("id", "role", "created_at", "usage") if key in data}
    metadata = data.get("metadata")
    summary = metadata.get(SUMMARY_KEY) if isinstance(metadata, Mapping) else None
    if isinstance(summary, Mapping) and "usage" in summary:
        clear["metadata"] = {SUMMARY_KEY: {"usage": summary["usage"]}}
    return clear
