"""What the log never shows: the one set of rules for names that look like credentials.

Rules:

1. **A name is secret** when, lower-cased with ``-`` read as ``_``, it contains one of
   ``SECRET_WORDS`` (``api-key``, ``X-Api-Key`` and ``GITHUB_TOKEN`` all are). The log
   formatters (``gateway.ops.logs``) replace the value of such an extra field with
   ``REDACTED``, whatever its source.
2. **Text is redacted by the same rule** (``redact_text``), for what the gateway logs as it was
   written by someone else (a child's stderr, the stderr tail an exit quotes): in every
   ``NAME=VALUE`` and ``NAME: VALUE`` pair whose name is secret (JSON's ``"NAME": "VALUE"``
   too), the value becomes ``REDACTED``; a quoted value keeps its quotes, and an HTTP
   authorization scheme before it (``Bearer``, ``Basic``, ``Token``) is kept.
3. A bare ``Bearer VALUE`` and the password of a URL's user information
   (``scheme://user:PASSWORD@host``) are redacted wherever they stand.

This is a second line of defence, not a parser: a secret printed with no name next to it
(``connecting with sk-123``) stays, and a harmless value under a secret-looking name
(``max_tokens=100``) is hidden. Text no rule can apply to (none of the words, no ``://``) is
returned as it is, after one scan.

Imports: the standard library only.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

SECRET_WORDS: Final = ("authorization", "token", "secret", "password", "api_key", "apikey", "cookie")
"""A name containing one of these (lower-cased, ``-`` read as ``_``) is a secret's (rule 1)."""
REDACTED: Final = "[redacted]"

_NAMED: Final = re.compile(r"""(?P<name>[A-Za-z0-9_.\-]+)["']?[ \t]*[:=][ \t]*""")
"""A name and what joins it to its value: ``NAME=``, ``NAME: ``, ``"NAME": `` (rule 2). Only
this is consumed while looking, so a value can itself be the next name (``stderr: TOKEN=x``)."""
_VALUE: Final = re.compile(
    r"""(?P<value>"(?:[^"\\\n]|\\.)*"?|'[^'\n]*'?|(?i:(?:bearer|basic|token)[ \t]+)?[^\s"',;&}\]]+)"""
)
"""The value after a secret name: quoted, or up to a space or a delimiter (rule 2)."""
_SCHEME: Final = re.compile(r"(?i)(?:bearer|basic|token)[ \t]+")
_BEARER: Final = re.compile(r"(?i)\b(?P<scheme>bearer[ \t]+)[A-Za-z0-9._~+/\-]+=*")
_USERINFO: Final = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*):[^/\s@]+@")


@lru_cache(maxsize=1024)  # names come from the code (log extras) or repeat in a child's lines
def is_secret(name: str) -> bool:
    """Rule 1."""
    lowered = name.lower().replace("-", "_")
    return any(word in lowered for word in SECRET_WORDS)


def redact_text(text: str) -> str:
    """``text`` with the values rules 2 and 3 find replaced by ``REDACTED``."""
    lowered = text.lower().replace("-", "_")
    if "://" not in lowered and "bearer" not in lowered and not any(word in lowered for word in SECRET_WORDS):
        return text
    text = _redact_pairs(text)
    text = _BEARER.sub(lambda m: m["scheme"] + REDACTED, text)
    return _USERINFO.sub(lambda m: f"{m['head']}:{REDACTED}@", text)


def _redact_pairs(text: str) -> str:
    """Rule 2: the value after each secret name, left to right."""
    parts: list[str] = []
    done = 0  # text before this is in ``parts``
    for named in _NAMED.finditer(text):
        if named.start() < done or not is_secret(named["name"]):
            continue
        value = _VALUE.match(text, named.end())
        if value is None:
            continue
        parts += (text[done : named.end()], _redacted(value[0]))
        done = value.end()
    return "".join(parts) + text[done:] if parts else text


def _redacted(value: str) -> str:
    """``REDACTED`` in place of ``value``, its quotes and authorization scheme kept."""
    if value[0] in "\"'":
        quote = value[0]
        closed = quote if len(value) > 1 and value.endswith(quote) else ""
        return f"{quote}{REDACTED}{closed}"
    scheme = _SCHEME.match(value)
    return (scheme[0] if scheme is not None and scheme.end() < len(value) else "") + REDACTED
