"""Sealing: how a store writes its JSON records at rest, in clear or sealed with AES-GCM.

Every store holds one ``Sealing`` (made from its ``encryption=``) and passes the records it
writes and reads through it: messages (``message_text`` / ``message_value``,
``open_texts`` / ``open_message``), checkpoints and approval records (``record_text`` /
``record_value``, ``record``). Without keys it writes clear JSON, as before; with or
without, it refuses to read a sealed record it cannot open (``DecryptionError``), so
nothing sealed is ever read as an empty message or a checkpoint without its fields.

Every sealed value holds a token: AES-256-GCM under a key derived for the session
(HKDF-SHA256 from the store key, the session id in its info), the record kind and session
id as associated data, so a record copied into another session (or a checkpoint passed
off as a message) fails to open; a 12-byte nonce (``_Nonces``) and the 16-byte tag.

* Text form (files, PostgreSQL, Redis; a JSON object): ``{"lousho.sealed": "<token>",
  <clear fields>}``, the token ``lse1.<key id>.<base64(nonce ‖ ciphertext ‖ tag)>``.
* Binary form (``Sealing(binary=True)``: SQLite, a BLOB): ``<clear fields as a JSON
  object> NUL lse1.<key id>.<nonce ‖ ciphertext ‖ tag>``: no base64, nothing written twice.
  JSON text never holds a NUL byte, so the first one ends the clear part. Messages and
  checkpoints take this form; approval records keep the text form.

What stays in clear is ``_sealed_fields``': a message's id, role, time and usage (the token
holds the whole message); in text form a checkpoint's or approval's fields that servers
and sweeps read; a binary checkpoint is sealed whole (no server reads it). Clear and
sealed records, in either form, can sit side by side (before a first ``rotate_key``,
after keys were added, in a store written by an older release); ``reseal_*`` rewrite one
record as this sealing writes it.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import os
from binascii import b2a_base64
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..encryption import Encryption, EncryptionOption
from ..errors import DecryptionError, StoreCorruptError
from ..messages import Message
from ..serde import decode_json_object, encode_json_object, message_json, message_to_dict, to_json
from ._sealed_fields import (
    APPROVAL_CLEAR,
    CHECKPOINT_CLEAR,
    SEALED_KEY,
    SEALED_PREFIX,
    envelope,
    message_clear,
    sealed_key_id,
    token_of,
)

__all__ = [
    "APPROVAL_CLEAR",
    "CHECKPOINT_CLEAR",
    "SEALED_KEY",
    "Sealing",
    "Value",
    "sealed_key_id",
]

#: What a store keeps per record: JSON text, or (a binary store's sealed record) bytes; a
#: binary sealing writes ``bytearray`` (sqlite3 binds it without looking for an adapter,
#: which costs more than sealing for ``bytes``) and reads ``bytes``.
Value = str | bytes | bytearray
_VERSION = "lse1"
_NONCE = 12
#: The kinds of record a binary sealing writes in binary form.
_BINARY_KINDS = frozenset({"message", "checkpoint"})
#: Derived keys kept per store (key id, session id): enough for the sessions in flight.
_DERIVED_CACHE = 4096


def _value_key_id(value: object) -> str | None:
    """``sealed_key_id`` of a text or binary value (``""``: sealed, its key id unreadable)."""
    if type(value) is str:
        return sealed_key_id(value)
    if isinstance(value, (bytes, bytearray)) and b"\0" in value:
        parts = bytes(value).partition(b"\0")[2].split(b".", 2)
        return parts[1].decode("ascii", "replace") if len(parts) == 3 else ""
    return None


class Sealing:
    """A store's sealing: ``Sealing(encryption, binary=False)`` (``None``: write clear, refuse
    sealed); ``binary``: the store keeps bytes (SQLite BLOBs), see the module.

    Thread-safe: the derived keys are cached in dicts (a race computes one twice).
    """

    def __init__(self, encryption: EncryptionOption = None, *, binary: bool = False) -> None:
        self.encryption = Encryption.of(encryption)
        self.binary = binary
        self._derived: dict[tuple[str, str], Any] = {}
        #: (kind, session id) -> the current key's encrypt and the associated data
        self._sealers: dict[tuple[str, str], tuple[Callable[..., bytes], bytes]] = {}
        self._aead: Any = None
        if self.encryption is not None:
            self._load_cryptography()
            current = self.encryption.current
            self._token_head = f"{_VERSION}.{current}."
            self._blob_head = b"\0" + self._token_head.encode("ascii")

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

    def _sealer(self, kind: str, session_id: str) -> tuple[Callable[..., bytes], bytes]:
        assert self.encryption is not None
        sealer = (
            self._cipher(self.encryption.current, session_id).encrypt,
            _associated(kind, session_id),
        )
        if len(self._sealers) >= _DERIVED_CACHE:
            self._sealers.clear()
        self._sealers[(kind, session_id)] = sealer
        return sealer

    def _seal(self, kind: str, session_id: str, plain: bytes) -> tuple[bytes, bytes]:
        """The nonce and ``ciphertext ‖ tag`` of ``plain`` for ``session_id``, with the
        current key."""
        encrypt, associated = self._sealers.get((kind, session_id)) or self._sealer(
            kind, session_id
        )
        nonce = _NONCES.next()
        return nonce, encrypt(nonce, plain, associated)

    def seal(self, kind: str, session_id: str, text: str) -> str:
        """A token sealing ``text`` for ``session_id`` with the current key."""
        nonce, sealed = self._seal(kind, session_id, text.encode("utf-8"))
        return self._token_head + b2a_base64(nonce + sealed, newline=False).decode("ascii")

    def _blob(self, kind: str, session_id: str, clear: bytes, plain: bytes) -> bytearray:
        """The binary form: ``clear`` (a JSON object's bytes, or none), NUL, the token
        sealing ``plain``."""
        encrypt, associated = self._sealers.get((kind, session_id)) or self._sealer(
            kind, session_id
        )
        nonce = _NONCES.next()  # _seal, written out: this is every SQLite write's path
        return _JOIN((clear, self._blob_head, nonce, encrypt(nonce, plain, associated)))

    def open(self, kind: str, session_id: str, token: object, *, source: str) -> str:
        """The text ``token`` seals; ``DecryptionError`` naming ``source`` (the session) and
        the key id when it cannot be opened."""
        if not isinstance(token, str) or token.count(".") != 2:
            raise StoreCorruptError(f"{source}: {SEALED_KEY!r} is not a sealed token")
        version, key_id, body = token.split(".")
        self._check_key(version, key_id, source)
        try:
            raw = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise StoreCorruptError(f"{source}: the sealed value is not base64") from None
        return self._open_raw(kind, session_id, key_id, raw, source)

    def _open_blob(
        self, kind: str, session_id: str, value: bytes | bytearray, *, source: str
    ) -> str:
        """The text a binary value's token (after its first NUL) seals."""
        version, _, rest = value.partition(b"\0")[2].partition(b".")
        key_id, dot, raw = rest.partition(b".")
        if not dot or not version.isascii() or not key_id.isascii():
            raise StoreCorruptError(f"{source}: not a sealed value")
        self._check_key(version.decode("ascii"), key_id.decode("ascii"), source)
        return self._open_raw(kind, session_id, key_id.decode("ascii"), raw, source)

    def _check_key(self, version: str, key_id: str, source: str) -> None:
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

    def _open_raw(
        self, kind: str, session_id: str, key_id: str, raw: bytes | bytearray, source: str
    ) -> str:
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

    def is_current(self, value: Value, kind: str = "message", *, text: bool = False) -> bool:
        """Whether ``value`` is written as this sealing writes a ``kind`` record: sealed with
        the current key (in binary form if this sealing writes that kind so, unless ``text``),
        or clear when there are no keys."""
        key_id = _value_key_id(value)
        if self.encryption is None:
            return key_id is None
        binary = self.binary and kind in _BINARY_KINDS and not text
        return key_id == self.encryption.current and (type(value) is not str) == binary

    # -- messages -----------------------------------------------------------------------

    def message_text(self, session_id: str, message: Message) -> str:
        """``message`` as the JSON text a store keeps (``message_json``, sealed with keys)."""
        if self.encryption is None:
            return message_json(message)
        text, clear = self._message_json(message)
        return envelope(self.seal("message", session_id, text), clear)

    def message_value(self, session_id: str, message: Message) -> Value:
        """``message`` as this store keeps it: ``message_text``, or in binary form."""
        if self.encryption is None:
            return message_json(message)
        text, clear = self._message_json(message)
        if not self.binary:
            return envelope(self.seal("message", session_id, text), clear)
        return self._blob("message", session_id, clear.encode(), text.encode("utf-8"))

    def _message_json(self, message: Message) -> tuple[str, str]:
        """The JSON of ``message`` and of its clear fields."""
        try:
            data = message_to_dict(message)
        except RecursionError:
            message_json(message)  # raises the ValueError naming the field
            raise
        text = to_json(data, what=f"message {message.id!r}")
        return text, message_clear(data, text)

    def open_texts(self, session_id: str, texts: Iterable[Any], *, source: str) -> list[Any]:
        """The message texts a store read, each sealed one opened (anything but text and a
        binary sealing's bytes as it is: the codec refuses it)."""
        out = []
        for text in texts:
            if type(text) is str:
                if text.startswith(SEALED_PREFIX):
                    text = self.open("message", session_id, token_of(text, source), source=source)
            elif isinstance(text, (bytes, bytearray)) and self.binary:
                text = self._open_blob("message", session_id, text, source=source)
            out.append(text)
        return out

    def open_message(self, session_id: str, data: dict[str, Any], *, source: str) -> dict[str, Any]:
        """A parsed stored message, opened if sealed."""
        if SEALED_KEY not in data:
            return data
        text = self.open("message", session_id, data[SEALED_KEY], source=source)
        return decode_json_object(text, source=source)

    def forked_texts(
        self, source: str, new_id: str, values: Iterable[Value], *, where: str
    ) -> list[Value]:
        """Messages of session ``source`` as session ``new_id`` keeps them (a fork): each sealed
        one opened and sealed again for ``new_id`` (a record is bound to its session), its
        clear fields unchanged; clear ones as they are."""
        out: list[Value] = []
        origin = f"{where}: session {source!r}"
        for value in values:
            if isinstance(value, (bytes, bytearray)) and self.binary:
                plain = self._open_blob("message", source, value, source=origin)
                clear = bytes(value).partition(b"\0")[0]
                value = self._blob("message", new_id, clear, plain.encode("utf-8"))
            elif type(value) is str and value.startswith(SEALED_PREFIX):
                token = token_of(value, origin)
                plain = self.open("message", source, token, source=origin)
                assert self.encryption is not None
                sealed_token = self.seal("message", new_id, plain)
                value = SEALED_PREFIX + sealed_token + value[len(SEALED_PREFIX) + len(token) :]
            out.append(value)
        return out

    def reseal_message(self, session_id: str, value: Value, *, source: str) -> Value | None:
        """``value`` rewritten as this sealing writes it; ``None`` if it already is."""
        if self.is_current(value, "message"):
            return None
        (text,) = self.open_texts(session_id, [value], source=source)
        if not isinstance(text, str):
            raise StoreCorruptError(f"{source}: expected JSON text, got {type(text).__name__}")
        if self.encryption is None:
            return text
        clear = message_clear(decode_json_object(text, source=source), text)
        if self.binary:
            return self._blob("message", session_id, clear.encode(), text.encode("utf-8"))
        return envelope(self.seal("message", session_id, text), clear)

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
        return envelope(token, to_json(clear, what="sealed record"))

    def record_value(
        self, kind: str, session_id: str | None, data: Mapping[str, Any], *, what: str
    ) -> Value:
        """``record_text``, or (a binary sealing's checkpoint) the record sealed whole, in
        binary form."""
        if self.encryption is None or not self.binary or kind not in _BINARY_KINDS:
            return self.record_text(kind, session_id, data, what=what)
        text = encode_json_object(data, what=what)
        return self._blob(kind, session_id or "", b"", text.encode("utf-8"))

    def record(
        self, kind: str, session_id: str | None, text: Value, *, source: str
    ) -> dict[str, Any]:
        """A stored checkpoint or approval record, opened if sealed (the clear fields win:
        a server may have changed them, e.g. the fence)."""
        if isinstance(text, (bytes, bytearray)) and self.binary and b"\0" in text:
            opened = self._open_blob(kind, session_id or "", text, source=source)
            data = decode_json_object(opened, source=source)
            clear = bytes(text).partition(b"\0")[0]
            if clear:
                data.update(decode_json_object(clear, source=source))
            return data
        if isinstance(text, bytearray):
            text = bytes(text)
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
        self, kind: str, session_id: str | None, text: Value, *, source: str, as_text: bool = False
    ) -> Value | None:
        """``text`` rewritten as this sealing writes it (as JSON text if ``as_text``: a state
        record, whose version the store reads in SQL); ``None`` if it already is."""
        if self.is_current(text, kind, text=as_text):
            return None
        if kind == "approval":  # bound to the session the record names
            raw = text if isinstance(text, str) else bytes(text)
            sid = decode_json_object(raw, source=source).get("session_id")
            session_id = sid if isinstance(sid, str) else None
        data = self.record(kind, session_id, text, source=source)
        if as_text:
            return self.record_text(kind, session_id, data, what=source)
        return self.record_value(kind, session_id, data, what=source)


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
_JOIN = bytearray().join
os.register_at_fork(after_in_child=_NONCES.reset)
