"""Passwords in store URLs and conninfo strings: found, masked, and kept out of messages.

A URL's password is what lies between the first ``:`` of its user info and the
*last* ``@`` before the host (as ``urllib`` and the drivers read it: a raw ``@`` in a
password is still the password); options whose name ends in ``password`` (``password=``,
``sslpassword=``) or names a secret are masked too. ``scrub`` removes every form a
driver may quote of them (as written, percent-decoded) from a message: libpq, for one,
copies a password it cannot decode into its error.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["MASK", "redact_text", "redacted_url", "scrub", "secrets_of"]

MASK = "***"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*:)//")
#: an option holding a secret: ``password``, ``sslpassword``, ``client_secret``, ``token``
_SECRET_OPTION = re.compile(r"(?i)^\w*(?:password|passwd|secret|token)$")
_URL_OPTION = re.compile(r"([?&;])([^=&#;]*)=([^&#;]*)")
_KEYWORD_OPTION = re.compile(r"(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)")
#: a URL inside free text (an argparse error, a log line): up to a space or a quote
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]+")
#: secrets shorter than this are not scrubbed from free text (it would garble the message)
_SHORTEST = 3


def _split_authority(url: str) -> tuple[str, str, str] | None:
    """``(scheme://, netloc, rest)`` of ``url``; ``None`` when it has no ``//`` authority."""
    match = _SCHEME.match(url)
    if match is None:
        return None
    start = match.end()
    end = len(url)
    for stop in "/?#":
        at = url.find(stop, start)
        if at != -1:
            end = min(end, at)
    return url[:start], url[start:end], url[end:]


def _password(netloc: str) -> str | None:
    userinfo, at, _ = netloc.rpartition("@")
    if not at:
        return None
    _, colon, password = userinfo.partition(":")
    return password if colon else None


def redacted_url(url: str) -> str:
    """``url`` with the password of its netloc and any secret option replaced by ``***``."""
    parts = _split_authority(url)
    if parts is not None:
        head, netloc, rest = parts
        if _password(netloc) is not None:
            userinfo, _, host = netloc.rpartition("@")
            netloc = f"{userinfo.partition(':')[0]}:{MASK}@{host}"
        url = head + netloc + rest

    def option(match: re.Match[str]) -> str:
        sep, name, value = match.groups()
        secret = _SECRET_OPTION.match(unquote(name))
        return f"{sep}{name}={MASK if secret and value else value}"

    return _URL_OPTION.sub(option, url)


def secrets_of(conninfo: str) -> list[str]:
    """The passwords and secret options of a URL or ``key=value`` conninfo, in every form a
    driver may quote them (as written and percent-decoded), longest first."""
    found: list[str] = []
    parts = _split_authority(conninfo)
    if parts is not None:
        password = _password(parts[1])
        if password:
            found.append(password)
        found.extend(
            value
            for _, name, value in _URL_OPTION.findall(conninfo)
            if value and _SECRET_OPTION.match(unquote(name))
        )
    else:
        for name, value in _KEYWORD_OPTION.findall(conninfo):
            if _SECRET_OPTION.match(name):
                found.append(value)
                if value.startswith("'") and value.endswith("'") and len(value) > 1:
                    found.append(re.sub(r"\\(.)", r"\1", value[1:-1]))
    every = {form for secret in found for form in (secret, unquote(secret)) if form}
    return sorted(every, key=len, reverse=True)


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with each of ``secrets`` (as ``secrets_of`` lists them) replaced by ``***``."""
    for secret in secrets:
        if len(secret) >= _SHORTEST:
            text = text.replace(secret, MASK)
    return text


def redact_text(text: str) -> str:
    """``text`` with every URL in it redacted (``redacted_url``) and their secrets scrubbed."""
    urls = _URL_IN_TEXT.findall(text)
    secrets = [s for url in urls for s in secrets_of(url)]
    return scrub(_URL_IN_TEXT.sub(lambda m: redacted_url(m.group()), text), secrets)
