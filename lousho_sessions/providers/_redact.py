"""API keys: checked on the way in, scrubbed from every error on the way out.

:func:`secret_from` strips the whitespace around a key and refuses a key that
could not travel in an HTTP header (control characters, characters outside
latin-1) with a :class:`~lousho_sessions.errors.ProviderConfigError` that does
not show the key. :class:`Redactor` is the one place every error leaving an
HTTP provider passes through: it replaces the key, its escaped spellings
(Python ``repr``, JSON, bytes) and any fragment of eight or more of its
characters (a key cut by a truncated excerpt) with ``***`` in the error's
message and ``args``, in every string attribute, and along the whole
``__cause__``/``__context__`` chain; it also formats the providers' log lines.
"""

from __future__ import annotations

import contextlib
import json
import unicodedata
from typing import Any

from ..errors import ProviderConfigError, ProviderError

__all__ = ["MASK", "Redactor", "Secret", "secret_from"]

MASK = "***"

#: A fragment of the key this long (or the whole key, when shorter) is masked.
FRAGMENT = 8

#: Longer strings (a JSON document kept by a decode error) are searched for the
#: whole key only; fragments come from our own short, truncated excerpts.
_FRAGMENT_SCAN_LIMIT = 65536


class Secret:
    """A string (the API key) that never shows in a ``repr`` or ``str``."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("an API key is not pickled")


def secret_from(value: str | None, source: str) -> Secret | None:
    """``value`` without surrounding whitespace as a :class:`Secret`; ``None`` when empty.

    ``source`` names where the key came from (``"api_key"``,
    ``"$OPENAI_API_KEY"``) for the error raised when the key holds a control
    character or a character outside latin-1: HTTP headers cannot carry
    either. The error names the position and kind of character, never the key.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise ProviderConfigError(
            None, f"{source} must be a str, not {type(value).__name__}", retryable=False
        )
    value = value.strip()
    for position, char in enumerate(value):
        if ord(char) > 0xFF:
            problem = "a character outside latin-1, which an HTTP header cannot carry"
        elif unicodedata.category(char) == "Cc":
            problem = "a control character"
        else:
            continue
        raise ProviderConfigError(
            None,
            f"the API key from {source} holds {problem} at position {position} "
            f"(U+{ord(char):04X}); copy the key again",
            retryable=False,
        )
    return Secret(value) if value else None


class Redactor:
    """Scrubs one API key (and its fragments) from text and from exceptions."""

    __slots__ = ("_forms", "_fragments")

    def __init__(self, secret: Secret | None) -> None:
        key = secret.reveal() if secret else ""
        forms = {key} if key else set()
        if key:
            forms.add(repr(key)[1:-1])
            forms.add(json.dumps(key)[1:-1])
            forms.add(json.dumps(key)[1:-1].replace("/", "\\/"))
            forms.add(repr(key.encode("latin-1"))[2:-1])
            forms.add(repr(key.encode("utf-8"))[2:-1])
        self._forms = sorted(forms, key=len, reverse=True)
        fragments: set[str] = set()
        for form in self._forms:
            size = min(FRAGMENT, len(form))
            fragments.update(form[i : i + size] for i in range(len(form) - size + 1))
        self._fragments = fragments

    def __repr__(self) -> str:
        return "Redactor('***')"

    def text(self, text: str) -> str:
        """``text`` with the key, its escaped forms and its long fragments replaced by ``***``."""
        if not self._forms or not text:
            return text
        for form in self._forms:
            if form in text:
                text = text.replace(form, MASK)
        if len(text) > _FRAGMENT_SCAN_LIMIT:
            return text
        spans: list[tuple[int, int]] = []
        for fragment in self._fragments:
            start = text.find(fragment)
            while start != -1:
                spans.append((start, start + len(fragment)))
                start = text.find(fragment, start + 1)
        if not spans:
            return text
        spans.sort()
        merged: list[list[int]] = []
        for start, stop in spans:
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], stop)
            else:
                merged.append([start, stop])
        out: list[str] = []
        done = 0
        for start, stop in merged:
            out += [text[done:start], MASK]
            done = stop
        out.append(text[done:])
        return "".join(out)

    def exception(self, error: BaseException) -> None:
        """Scrub ``error`` in place: message, ``args``, attributes, notes, cause chain.

        A linked exception that still shows the key afterwards (one that
        builds its text from state we cannot reach) is replaced in the chain
        by a ``RuntimeError`` carrying its type and scrubbed text.
        """
        if not self._forms:
            return
        seen: set[int] = set()
        chain: list[BaseException] = []
        todo: list[BaseException] = [error]
        while todo:
            exc = todo.pop()
            if id(exc) in seen:
                continue
            seen.add(id(exc))
            chain.append(exc)
            todo.extend(self._scrub_one(exc))
        for exc in chain:
            for name in ("__cause__", "__context__"):
                linked = getattr(exc, name)
                if linked is not None and self._shows_key(linked):
                    setattr(exc, name, self._stand_in(linked))

    def _shows_key(self, exc: BaseException) -> bool:
        try:
            shown = f"{exc}{exc!r}"
        except Exception:
            return True
        return self.text(shown) != shown

    def _stand_in(self, exc: BaseException) -> BaseException:
        try:
            shown = str(exc)
        except Exception:
            shown = "(its text could not be read)"
        stand_in = RuntimeError(f"{type(exc).__name__}: {self.text(shown)}")
        stand_in.__cause__ = exc.__cause__
        stand_in.__context__ = exc.__context__
        stand_in.__suppress_context__ = exc.__suppress_context__
        return stand_in

    def log_line(self, message: str, *args: object) -> str:
        """``message % args`` with the key scrubbed: what the providers log."""
        return self.text(message % args if args else message)

    def _scrub_one(self, exc: BaseException) -> list[BaseException]:
        """Scrub one exception; return the exceptions it refers to."""
        linked: list[BaseException] = []
        if exc.__cause__ is not None:
            linked.append(exc.__cause__)
        if exc.__context__ is not None:
            linked.append(exc.__context__)
        with_args = self._value(exc.args, linked)
        if with_args != exc.args:
            exc.args = with_args
        if isinstance(exc, ProviderError):
            exc.message = self.text(exc.message)
        elif isinstance(exc, OSError):
            for name in ("strerror", "filename", "filename2"):
                value = getattr(exc, name, None)
                if isinstance(value, str):
                    setattr(exc, name, self.text(value))
        elif isinstance(exc, UnicodeError) and isinstance(getattr(exc, "object", None), str):
            # same length, so the error's positions still point at the right place
            obj: str = exc.object  # type: ignore[attr-defined]
            for form in self._forms:
                obj = obj.replace(form, "*" * len(form))
            exc.object = obj  # type: ignore[attr-defined]
        for name, value in list(getattr(exc, "__dict__", {}).items()):
            scrubbed = self._value(value, linked)
            if scrubbed is not value and scrubbed != value:
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(exc, name, scrubbed)
        return linked

    def _value(self, value: Any, linked: list[BaseException]) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, BaseException):
            linked.append(value)
            return value
        if isinstance(value, tuple):
            return tuple(self._value(item, linked) for item in value)
        if isinstance(value, list):
            return [self._value(item, linked) for item in value]
        reason = getattr(value, "reason", None)  # urllib3 keeps the real error here
        if isinstance(reason, BaseException):
            linked.append(reason)
        return value
