"""Sealing: how a store writes its JSON records at rest, in clear or sealed with AES-GCM.

Every store holds one ``Sealing`` (made from its ``encryption=``) and passes the JSON it
writes and reads through it: messages (``message_text`` / ``open_texts`` /
``open_message``), checkpoints and approval records (``record_text`` / ``record``).
Without keys it writes clear JSON, as before; with or without, it refuses to read a
sealed record it cannot open (``DecryptionError``), so nothing sealed is ever read as
an empty message or a checkpoint without its fields.

A sealed record stays a JSON object: ``{"lousho.sealed": "<token>", <clear fields>}``.

* The token is ``lse1.<key id>.<base64(nonce ‖ ciphertext ‖ tag)>``: AES-256-GCM under
  a key derived for the session (HKDF-SHA256 from the store key, the session id in its
  info), the record kind and session id as associated data, so a record copied into
  another session (or a checkpoint passed off as a message) fails to open.
* A message keeps in clear its ``id``, ``role``, ``created_at`` and usage (``usage``,
  and a compaction summary's ``metadata["lousho.summary"].usage``), so the SQL usage
  totals and server-side id lookups work unchanged; the token holds the whole message.
* A checkpoint or approval keeps in clear the fields stores and sweeps read on the
  server (ids, status, timestamps, fence, attempts: ``CHECKPOINT_CLEAR``,
  ``APPROVAL_CLEAR``); the token holds the others (messages, arguments, reasons).

Clear and sealed records can sit side by side (before a first ``rotate_key``, or after
keys were added); ``reseal_*`` rewrite one record to the current key.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import os
from binascii import b2a_base64
from collections.abc import Iterable, Mapping
from json.encoder import encode_basestring_ascii
from typing import Any

from ..encryption import Encryption, EncryptionOption
from ..errors import DecryptionError, StoreCorruptError
from ..messages import Message
from ..serde import decode_json_object, encode_json_object, message_json, message_to_dict, to_json
from ..usage_totals import SUMMARY_KEY

__all__ = [
    "APPROVAL_CLEAR",
    "CHECKPOINT_CLEAR",
    "SEALED_KEY",
    "Sealing",
    "sealed_key_id",
]

#: The key of a sealed record's token.
SEALED_KEY = "lousho.sealed"
#: How every sealed record's text starts (the token is written first).
SEALED_PREFIX = '{"' + SEALED_KEY + '":"'
_VERSION = "lse1"
_NONCE = 12
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
#: Derived keys kept per store (key id, session id): enough for the sessions in flight.
_DERIVED_CACHE = 4096


def sealed_key_id(text: str) -> str | None:
    """The key id a stored record was sealed with; ``None`` for a clear record."""
    if not text.startswith(SEALED_PREFIX):
        return None
    token = text[len(SEALED_PREFIX) : text.find('"', len(SEALED_PREFIX))]
    parts = token.split(".", 2)
    return parts[1] if len(parts) == 3 else ""


class Sealing:
    """A store's sealing: ``Sealing(encryption)`` (``None``: write clear, refuse sealed).

    Thread-safe: the derived keys are cached in a dict (a race computes one twice).
    """

    def __init__(self, encryption: EncryptionOption = None) -> None:
        self.encryption = Encryption.of(encryption)
        self._derived: dict[tuple[str, str], Any] = {}
        self._aead: Any = None
        if self.encryption is not None:
            self._load_cryptography()

    def __repr__(self) -> str:
        return f"Sealing({self.encryption!r})"

    @property
    def enabled(self) -> bool:
        return self.encryption is not None

    def _load_cryptography(self) -> None:
        try:
            from cryptography.hazmat.primitives import hashes
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
            from cryptography.hazmat.primitives.kdf.hkdf import HKDF
        except ImportError as exc:
            from ..encryption import EncryptionKeyError

            raise EncryptionKeyError(
                "encryption= needs the cryptography package: "
                f"pip install 'lousho-sessions[encryption]' ({exc})"
            ) from exc
        self._aead = AESGCM
        self._hkdf = HKDF
        self._sha256 = hashes.SHA256

    # -- the cipher ---------------------------------------------------------------------

    def _cipher(self, key_id: str, session_id: str) -> Any:
        cipher = self._derived.get((key_id, session_id))
        if cipher is None:
            assert self.encryption is not None
            key = self.encryption.keys[key_id]
            info = b"lousho-sessions/v1/session:" + session_id.encode("utf-8")
            derived = self._hkdf(algorithm=self._sha256(), length=32, salt=None, info=info)
            cipher = self._aead(derived.derive(key))
            if len(self._derived) >= _DERIVED_CACHE:
                self._derived.clear()
            self._derived[(key_id, session_id)] = cipher
        return cipher

    def seal(self, kind: str, session_id: str, text: str) -> str:
        """A token sealing ``text`` for ``session_id`` with the current key."""
        assert self.encryption is not None
        key_id = self.encryption.current
        cipher = self._derived.get((key_id, session_id)) or self._cipher(key_id, session_id)
        nonce = _NONCES.next()
        sealed = cipher.encrypt(
            nonce, text.encode("utf-8"), _AAD[kind] + session_id.encode("utf-8")
        )
        return f"{_VERSION}.{key_id}.{b2a_base64(nonce + sealed, newline=False).decode('ascii')}"

    def open(self, kind: str, session_id: str, token: object, *, source: str) -> str:
        """The text ``token`` seals; ``DecryptionError`` naming ``source`` (the session) and
        the key id when it cannot be opened."""
        if not isinstance(token, str) or token.count(".") != 2:
            raise StoreCorruptError(f"{source}: {SEALED_KEY!r} is not a sealed token")
        version, key_id, body = token.split(".")
        if version != _VERSION:
            raise DecryptionError(
                f"{source}: sealed in format {version!r}, which this release cannot open"
            )
        if self.encryption is None:
            raise DecryptionError(
                f"{source}: sealed with key id {key_id!r}, but this store has no encryption "
                "keys (pass encryption= or ?encryption_key_env=)"
            )
        if key_id not in self.encryption.keys:
            raise DecryptionError(
                f"{source}: sealed with key id {key_id!r}, which is not among this store's "
                f"keys {sorted(self.encryption.keys)}"
            )
        try:
            raw = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise StoreCorruptError(f"{source}: the sealed value is not base64") from None
        from cryptography.exceptions import InvalidTag

        try:
            plain: bytes = self._cipher(key_id, session_id).decrypt(
                raw[:_NONCE], raw[_NONCE:], _associated(kind, session_id)
            )
        except (InvalidTag, ValueError):
            raise DecryptionError(
                f"{source}: cannot decrypt with key id {key_id!r}: a wrong key, or the record "
                "was altered or moved from another session"
            ) from None
        return plain.decode("utf-8")

    def is_current(self, text: str) -> bool:
        """Whether ``text`` is written as this sealing writes: sealed with the current key, or
        clear when there are no keys."""
        key_id = sealed_key_id(text)
        if self.encryption is None:
            return key_id is None
        return key_id == self.encryption.current

    # -- messages -----------------------------------------------------------------------

    def message_text(self, session_id: str, message: Message) -> str:
        """``message`` as the JSON text a store keeps (``message_json``, sealed with keys)."""
        if self.encryption is None:
            return message_json(message)
        try:
            data = message_to_dict(message)
        except RecursionError:
            return message_json(message)  # raises the ValueError naming the field
        text = to_json(data, what=f"message {message.id!r}")
        token = self.seal("message", session_id, text)
        if data.get("metadata") or type(data.get("id")) is not str or "extra" in data:
            return _envelope(token, _dict_clear(data))  # the general case
        # the common one, written out: a plain message's id, role, time and usage
        usage = data.get("usage")
        return (
            f'{SEALED_PREFIX}{token}","id":{encode_basestring_ascii(data["id"])},'
            f'"role":{encode_basestring_ascii(data["role"])},'
            f'"created_at":{encode_basestring_ascii(data["created_at"])}'
            + ("}" if usage is None else f',"usage":{to_json(usage, what="usage")}}}')
        )

    def _sealed_message(self, session_id: str, text: str, clear: dict[str, Any]) -> str:
        return _envelope(self.seal("message", session_id, text), clear)

    def open_texts(self, session_id: str, texts: Iterable[str], *, source: str) -> list[str]:
        """The message texts a store read, each sealed one opened."""
        out = []
        for text in texts:
            if type(text) is str and text.startswith(SEALED_PREFIX):
                text = self.open("message", session_id, _token(text, source), source=source)
            out.append(text)
        return out

    def open_message(self, session_id: str, data: dict[str, Any], *, source: str) -> dict[str, Any]:
        """A parsed stored message, opened if sealed."""
        if SEALED_KEY not in data:
            return data
        text = self.open("message", session_id, data[SEALED_KEY], source=source)
        return decode_json_object(text, source=source)

    def forked_texts(
        self, source: str, new_id: str, texts: Iterable[str], *, where: str
    ) -> list[str]:
        """Messages of session ``source`` as session ``new_id`` keeps them (a fork): each sealed
        one opened and sealed again for ``new_id`` (a record is bound to its session), its
        clear fields unchanged; clear ones as they are."""
        out = []
        for text in texts:
            if text.startswith(SEALED_PREFIX):
                origin = f"{where}: session {source!r}"
                token = _token(text, origin)
                plain = self.open("message", source, token, source=origin)
                if self.encryption is None:
                    text = plain
                else:
                    sealed = self.seal("message", new_id, plain)
                    text = SEALED_PREFIX + sealed + text[len(SEALED_PREFIX) + len(token) :]
            out.append(text)
        return out

    def reseal_message(self, session_id: str, text: str, *, source: str) -> str | None:
        """``text`` rewritten as this sealing writes it; ``None`` if it already is."""
        if self.is_current(text):
            return None
        if text.startswith(SEALED_PREFIX):
            text = self.open("message", session_id, _token(text, source), source=source)
        if self.encryption is None:
            return text
        data = decode_json_object(text, source=source)
        return self._sealed_message(session_id, text, _dict_clear(data))

    # -- checkpoints and approvals ------------------------------------------------------

    def record_text(
        self, kind: str, session_id: str | None, data: Mapping[str, Any], *, what: str
    ) -> str:
        """A checkpoint (``kind`` ``"checkpoint"``) or approval record as stored JSON text:
        with keys, its fields but the clear ones sealed."""
        if self.encryption is None:
            return encode_json_object(data, what=what)
        if type(data) is not dict and not isinstance(data, Mapping):
            raise TypeError(
                f"{what}: expected a JSON object (a mapping), got {type(data).__name__}"
            )
        clear_fields = CHECKPOINT_CLEAR if kind == "checkpoint" else APPROVAL_CLEAR
        clear = {key: value for key, value in data.items() if key in clear_fields}
        rest = {key: value for key, value in data.items() if key not in clear_fields}
        token = self.seal(kind, session_id or "", encode_json_object(rest, what=what))
        return _envelope(token, clear)

    def record(
        self, kind: str, session_id: str | None, text: str | bytes, *, source: str
    ) -> dict[str, Any]:
        """A stored checkpoint or approval record, opened if sealed (the clear fields win:
        a server may have changed them, e.g. the fence)."""
        return self.open_record(
            kind, session_id, decode_json_object(text, source=source), source=source
        )

    def open_record(
        self, kind: str, session_id: str | None, data: dict[str, Any], *, source: str
    ) -> dict[str, Any]:
        """``record`` for a parsed record."""
        if SEALED_KEY not in data:
            return data
        token = data.pop(SEALED_KEY)
        opened = decode_json_object(
            self.open(kind, session_id or "", token, source=source), source=source
        )
        opened.update(data)
        return opened

    def reseal_record(
        self, kind: str, session_id: str | None, text: str, *, source: str
    ) -> str | None:
        """``text`` rewritten as this sealing writes it; ``None`` if it already is."""
        data = decode_json_object(text, source=source)
        if kind == "approval":  # bound to the session the record names
            sid = data.get("session_id")
            session_id = sid if isinstance(sid, str) else None
        token = data.get(SEALED_KEY)
        key_id = token.split(".")[1] if isinstance(token, str) and token.count(".") == 2 else None
        if key_id == (None if self.encryption is None else self.encryption.current):
            return None
        data = self.open_record(kind, session_id, data, source=source)
        return self.record_text(kind, session_id, data, what=source)


def _associated(kind: str, session_id: str) -> bytes:
    return _AAD[kind] + session_id.encode("utf-8")


#: the associated data of a record, but its session id: what kind of record it is
_AAD = {
    kind: f"lousho-sessions/v1/{kind}/".encode() for kind in ("message", "checkpoint", "approval")
}


class _Nonces:
    """AES-GCM nonces: a random 8-byte prefix for this process and a 4-byte counter (NIST
    SP 800-38D's deterministic construction, with the prefix random): unique within the
    process, and across processes unless two draw the same 64-bit prefix. A new prefix
    every 2**32 nonces, and in a forked child (which must not repeat its parent's)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._prefix = os.urandom(8)
        self._count = itertools.count()

    def next(self) -> bytes:
        n = next(self._count)  # atomic under the GIL: no two threads get the same n
        if n >= 0xFFFFFFFF:
            self.reset()
            return self.next()
        return self._prefix + n.to_bytes(4, "big")


_NONCES = _Nonces()
os.register_at_fork(after_in_child=_NONCES.reset)


def _envelope(token: str, clear: Mapping[str, Any]) -> str:
    """``{"lousho.sealed": token, **clear}`` as JSON, the token first (``SEALED_PREFIX``)."""
    rest = to_json(clear, what="sealed record")
    return f'{SEALED_PREFIX}{token}",{rest[1:]}' if len(rest) > 2 else f'{SEALED_PREFIX}{token}"}}'


def _token(text: str, source: str) -> str:
    end = text.find('"', len(SEALED_PREFIX))
    if end < 0:
        raise StoreCorruptError(f"{source}: a sealed message without its token's end")
    return text[len(SEALED_PREFIX) : end]


def _dict_clear(data: Mapping[str, Any]) -> dict[str, Any]:
    """``_message_clear`` of a parsed message."""
    clear = {key: data[key] for key in ("id", "role", "created_at", "usage") if key in data}
    metadata = data.get("metadata")
    summary = metadata.get(SUMMARY_KEY) if isinstance(metadata, Mapping) else None
    if isinstance(summary, Mapping) and "usage" in summary:
        clear["metadata"] = {SUMMARY_KEY: {"usage": summary["usage"]}}
    return clear
