"""A configured root (``--root``, a server's ``roots``), as the ``Root`` the gateway answers a
child's ``roots/list`` with when no client can. Pure: imports only the standard library and
``gateway.errors``; ``call`` and the gateway share it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
