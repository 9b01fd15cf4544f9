"""``Encryption``: the keys a store seals its records with (encryption at rest).

A store given ``encryption=`` seals message bodies, checkpoints and approval
records with AES-GCM before writing them (``stores._sealing``); ids, timestamps,
lengths, statuses and usage stay in clear. This module holds only the keys: it
never imports ``cryptography`` (the ``encryption`` extra), which the store loads
when it first seals or opens a record.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Mapping
from typing import Union

from .errors import LoushoError

__all__ = ["KEY_BYTES", "KEY_ID_PATTERN", "Encryption", "EncryptionKeyError", "EncryptionOption"]

#: The length of every key: AES-256.
KEY_BYTES = 32
#: What a key id may be: it is stored beside each sealed value (no dots, colons or commas).
KEY_ID_PATTERN = r"[A-Za-z0-9_-]{1,64}"
_KEY_ID = re.compile(KEY_ID_PATTERN)


class EncryptionKeyError(LoushoError, ValueError):
    """Keys that cannot be used as given: a bad key id, a key not 32 bytes long, an unset
    or malformed environment variable. Never shows a key."""

    code = "LOUSHO_ENCRYPTION_KEY"


class Encryption:
    """The keys a store seals with: ``Encryption(keys={key_id: key, ...}, current=None)``.

    ``keys`` maps key ids (``[A-Za-z0-9_-]{1,64}``) to 32-byte keys; every key opens
    what it sealed, ``current`` (default: the last key) seals what is written. To
    rotate, add a new key last, run ``lousho rotate-key`` (or the store's
    ``rotate_key()``), then drop the old key. The keys never appear in ``repr``.
    """

    __slots__ = ("current", "keys")

    keys: Mapping[str, bytes]
    current: str

    def __init__(self, keys: Mapping[str, bytes], current: str | None = None) -> None:
        if not isinstance(keys, Mapping) or not keys:
            raise EncryptionKeyError(
                "encryption needs at least one key: a mapping of key id -> 32-byte key"
            )
        checked: dict[str, bytes] = {}
        for key_id, key in keys.items():
            if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
                raise EncryptionKeyError(
                    f"encryption key id {key_id!r} does not match {KEY_ID_PATTERN}"
                )
            if not isinstance(key, (bytes, bytearray)) or len(key) != KEY_BYTES:
                what = f"{len(key)} bytes" if isinstance(key, (bytes, bytearray)) else "not bytes"
                raise EncryptionKeyError(
                    f"encryption key {key_id!r} must be {KEY_BYTES} bytes, got {what} "
                    "(make one with os.urandom(32))"
                )
            checked[key_id] = bytes(key)
        if current is None:
            current = list(checked)[-1]
        if current not in checked:
            raise EncryptionKeyError(
                f"current encryption key {current!r} is not one of the keys {sorted(checked)}"
            )
        object.__setattr__(self, "keys", checked)
        object.__setattr__(self, "current", current)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Encryption is read-only: cannot set {name!r}")

    def __repr__(self) -> str:
        return f"Encryption(keys={list(self.keys)!r}, current={self.current!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Encryption):
            return NotImplemented
        return self.keys == other.keys and self.current == other.current

    def __hash__(self) -> int:
        return hash((tuple(self.keys), self.current))

    @classmethod
    def parse(cls, text: str, *, source: str = "encryption keys") -> Encryption:
        """Keys written ``keyid:base64key[,keyid:base64key...]`` (the last one current)."""
        keys: dict[str, bytes] = {}
        for item in text.split(","):
            key_id, sep, encoded = item.strip().partition(":")
            if not sep or not key_id:
                raise EncryptionKeyError(
                    f"{source}: expected keyid:base64key[,keyid:base64key...], got an item "
                    f"without 'keyid:' ({len(item.strip())} characters)"
                )
            try:
                keys[key_id] = base64.b64decode(encoded.strip(), validate=True)
            except (binascii.Error, ValueError):
                raise EncryptionKeyError(
                    f"{source}: the key of {key_id!r} is not valid base64"
                ) from None
        try:
            return cls(keys)
        except EncryptionKeyError as exc:
            raise EncryptionKeyError(f"{source}: {exc}") from None

    @classmethod
    def from_env(cls, name: str) -> Encryption:
        """The keys in environment variable ``name`` (see ``parse``); ``EncryptionKeyError``
        naming the variable when it is unset, empty or malformed."""
        value = os.environ.get(name, "").strip()
        if not value:
            raise EncryptionKeyError(
                f"environment variable {name} is not set: it must hold the encryption keys "
                "as keyid:base64key[,keyid:base64key...]"
            )
        return cls.parse(value, source=f"environment variable {name}")

    @classmethod
    def of(cls, value: EncryptionOption) -> Encryption | None:
        """``encryption=`` as stores take it: ``None``, an ``Encryption``, or a mapping of
        key id -> key (the last one current)."""
        if value is None or isinstance(value, Encryption):
            return value
        if isinstance(value, Mapping):
            return cls(value)
        raise EncryptionKeyError(
            "encryption= takes a mapping of key id -> 32-byte key or an Encryption, "
            f"got {type(value).__name__}"
        )


#: What a store's ``encryption=`` accepts.
EncryptionOption = Union[Encryption, Mapping[str, bytes], None]
