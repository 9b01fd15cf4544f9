"""``CachePolicy``: how a provider asks for the model service's prompt cache.

Every HTTP provider takes ``cache=``: ``True`` (the default) for
``CachePolicy()``, ``False`` to send no cache hints at all, or a
``CachePolicy``. Caching never changes what the model sees: only fields that
the service reads to cache (Anthropic ``cache_control``, OpenAI
``prompt_cache_key``) are added to a request.
"""

from __future__ import annotations

from typing import Literal

import attrs

__all__ = ["CachePolicy", "cache_policy"]

_TTLS = ("5m", "1h")


def _check_ttl(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in _TTLS:
        raise ValueError(f"CachePolicy(ttl={value!r}): expected one of {list(_TTLS)}")


def _check_key(_: object, attribute: attrs.Attribute[str | None], value: str | None) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ValueError(f"CachePolicy(key={value!r}): expected a non-empty string or None")


@attrs.frozen
class CachePolicy:
    """How a provider uses the prompt cache.

    ``ttl`` (Anthropic): how long the cache entries written live, ``"5m"``
    (the default; writes cost 1.25x the input price) or ``"1h"`` (writes cost
    2x; worth it when a session pauses for more than five minutes between
    turns). ``key`` (OpenAI): the ``prompt_cache_key`` sent, which routes
    requests sharing a prefix to the same cache; ``None`` sends the session id.
    ``retention`` (OpenAI): ``prompt_cache_retention`` (``"in_memory"`` or
    ``"24h"`` on the models that offer it); ``None`` sends nothing.
    """

    ttl: Literal["5m", "1h"] = attrs.field(default="5m", validator=_check_ttl)
    key: str | None = attrs.field(default=None, validator=_check_key)
    retention: str | None = None


def cache_policy(cache: bool | CachePolicy) -> CachePolicy | None:
    """The policy ``cache=`` stands for; ``None`` for no caching."""
    if cache is True:
        return CachePolicy()
    if cache is False:
        return None
    if isinstance(cache, CachePolicy):
        return cache
    raise TypeError(f"cache={cache!r}: expected True, False or a CachePolicy")
