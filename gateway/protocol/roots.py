"""Roots as values: a configured root (``--root``, a server's ``roots``), as the ``Root`` the
gateway answers a child's ``roots/list`` with when no client can (``call`` and the gateway share
it); and a client's roots set, checked and named, as the key of the shared children that hold
it (``roots_of_answer``, ``roots_key``). Pure: imports only the standard library and
``gateway.errors``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Final

from gateway.errors import ConfigError


def parse_root(value: Any, where: str) -> dict[str, str]:
    """A ``Root``: a path or ``file://`` URI, or ``{"uri": ..., "name": ...}``."""
    name: Any = None
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"uri", "name"})
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}", "unknown key (known: uri, name)")
        value, name = value.get("uri"), value.get("name")
        if name is not None and not isinstance(name, str):
            raise ConfigError(f"{where}.name", "must be a string")
    if not isinstance(value, str) or not value:
        raise ConfigError(where, "must be a path, a file:// URI or a {uri, name} object")
    uri = Path(value).as_uri() if value.startswith("/") else value
    if not uri.startswith("file://"):
        raise ConfigError(where, f"{value!r} is not an absolute path or a file:// URI (roots are file:// URIs)")
    return {"uri": uri, "name": name} if name else {"uri": uri}


# -- a client's roots, as the key of the children that hold them (issue #23) -------------

ROOTS_INPUT_KEY: Final = "roots"
"""The ``inputRequests`` key of the gateway's own MRTR round that asks a modern client for its
roots (``gateway.relay.client_roots``); the retry answers under the same key."""
MAX_ROOTS_PER_SET: Final = 64
"""Roots one client may give (a workspace has a handful): more is refused, not truncated, since
a child told part of a client's roots would not be told exactly its roots."""
MAX_ROOT_URI_CHARS: Final = 4096
"""The longest root URI (or name) taken from a client: a path, not a payload."""

Roots = tuple[dict[str, str], ...]
"""A client's roots, in its own order, each ``{"uri": ..., "name": ...}`` (name optional)."""


def roots_of_answer(result: object) -> Roots | str:
    """A ``roots/list`` result (``{"roots": [Root, ...]}``) as ``Roots``, or why it is not one.
    Only ``uri`` and ``name`` are kept (the fields a ``Root`` has; ``_meta`` is dropped)."""
    if not isinstance(result, dict) or not isinstance(result.get("roots"), list):
        return "a roots/list result is an object with a roots array"
    given: list[Any] = result["roots"]
    if len(given) > MAX_ROOTS_PER_SET:
        return f"more than {MAX_ROOTS_PER_SET} roots (MAX_ROOTS_PER_SET)"
    roots: list[dict[str, str]] = []
    for index, root in enumerate(given):
        uri = root.get("uri") if isinstance(root, dict) else None
        if not isinstance(uri, str) or not uri.startswith("file://") or len(uri) > MAX_ROOT_URI_CHARS:
            return f"roots[{index}].uri is not a file:// URI of at most {MAX_ROOT_URI_CHARS} characters"
        assert isinstance(root, dict)
        name = root.get("name")
        if name is not None and (not isinstance(name, str) or len(name) > MAX_ROOT_URI_CHARS):
            return f"roots[{index}].name is not a string of at most {MAX_ROOT_URI_CHARS} characters"
        roots.append({"uri": uri, "name": name} if name else {"uri": uri})
    return tuple(roots)


def roots_key(roots: Roots) -> str:
    """The pool key's name for a roots set: the first 16 hex digits of the SHA-256 of its
    canonical JSON (order kept: a set given in another order is another set, told as given)."""
    canonical = json.dumps(list(roots), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def roots_request() -> dict[str, Any]:
    """The ``inputRequests`` entry of the gateway's own round: ``roots/list``, no params."""
    return {"method": "roots/list", "params": {}}
