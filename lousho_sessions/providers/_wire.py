"""Small pieces the wire formats share: keys, environment, images, settings, plain JSON."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..messages import ImagePart
from ._redact import Secret, secret_from

__all__ = [
    "api_key_from",
    "env",
    "image_base64",
    "image_media_type",
    "pick_settings",
    "plain_json",
]


def api_key_from(api_key: str | None, env: str) -> Secret | None:
    """The key given, else the environment variable's value, else ``None``.

    Surrounding whitespace is stripped; a key HTTP cannot carry is refused
    with ``ProviderConfigError`` (see :func:`._redact.secret_from`).
    """
    if api_key is not None:
        return secret_from(api_key, "api_key")
    return secret_from(os.environ.get(env), f"${env}")


def env(name: str) -> str | None:
    """The environment variable's value; ``None`` when unset or empty."""
    return os.environ.get(name) or None


_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def image_media_type(part: ImagePart) -> str:
    """The part's media type, else guessed from its bytes (PNG, JPEG, GIF, WebP), else PNG."""
    if part.media_type:
        return part.media_type
    data = part.data or b""
    for signature, media_type in _SIGNATURES:
        if data.startswith(signature):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return "image/png"


def image_base64(part: ImagePart) -> str:
    """The part's bytes as base64 text."""
    return base64.b64encode(part.data or b"").decode("ascii")


def pick_settings(
    settings: Mapping[str, Any], allowed: Iterable[str], renames: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The request-body fields taken from ``ModelRequest.settings``.

    Only ``allowed`` keys (after ``renames``) with a value other than ``None``
    are sent, so settings meant for other layers never reach the API;
    ``settings["extra_body"]`` (a mapping) is merged in as it is.
    """
    allowed = frozenset(allowed)
    renames = renames or {}
    body: dict[str, Any] = {}
    for key, value in settings.items():
        key = renames.get(key, key)
        if key in allowed and value is not None:
            body[key] = value
    extra = settings.get("extra_body")
    if isinstance(extra, Mapping):
        body.update(extra)
    return body


def plain_json(value: Any) -> Any:
    """``value`` with every mapping a dict and every tuple a list, for ``json.dumps``."""
    if isinstance(value, Mapping):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_json(v) for v in value]
    return value
