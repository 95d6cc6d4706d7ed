"""The MCP protocol revisions the gateway speaks, ordered through a registry.

Versions are compared by their place in ``ALL_VERSIONS`` (oldest first), never as strings.
The modern era (2026-07-28) is stateless with per-request ``_meta``; the legacy era
(2024-11-05 … 2025-11-25) uses ``initialize`` and sessions (digest §0.1).
Imports: standard library only.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class Era(StrEnum):
    MODERN = "modern"
    LEGACY = "legacy"


MODERN: Final = Era.MODERN
LEGACY: Final = Era.LEGACY
"""``Era``'s members as module names, for the code every request runs: on Python 3.11 a
member read from its class (``Era.MODERN``) costs about 100 ns, 700-900 instructions (the enum
metaclass's ``__getattr__`` keeps the attribute load on its slow path), a module name about
25 ns. (3.12 removed that hook.)"""


MODERN_VERSIONS: Final = ("2026-07-28",)
LEGACY_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
ALL_VERSIONS: Final = LEGACY_VERSIONS + MODERN_VERSIONS

ADVERTISED_VERSIONS: Final = MODERN_VERSIONS
"""What the gateway tells a 2026-07-28 client it may name in a request's ``_meta``: in
``server/discover``'s ``supportedVersions`` and in a -32022's ``data.supported``, so the two
always agree. The legacy revisions are not listed: they are reached through ``initialize``
and a session, never per request, so a client retrying with one would only get -32022 again."""

LATEST_MODERN: Final = MODERN_VERSIONS[-1]
LATEST_LEGACY: Final = LEGACY_VERSIONS[-1]
# A legacy client that sends no MCP-Protocol-Version header and has nothing else naming
# its version is assumed to speak this one (L-TR §Protocol Version Header).
DEFAULT_LEGACY_HTTP_VERSION: Final = "2025-03-26"

# Legacy HTTP clients announced by version: batches were allowed only in 2025-03-26.
BATCH_VERSIONS: Final = frozenset({"2025-03-26"})


def era_of(version: str) -> Era | None:
    """The era of a known version, or None for a version the gateway does not know."""
    if version in MODERN_VERSIONS:
        return Era.MODERN
    if version in LEGACY_VERSIONS:
        return Era.LEGACY
    return None


def is_known(version: str) -> bool:
    return version in ALL_VERSIONS


def rank(version: str) -> int:
    """Position in the registry, oldest first; raises ValueError for unknown versions."""
    return ALL_VERSIONS.index(version)


def negotiate_legacy(requested: str) -> str:
    """Legacy lifecycle: echo a supported legacy version, else offer our latest legacy one."""
    return requested if requested in LEGACY_VERSIONS else LATEST_LEGACY


def newest_common(offered: list[str] | tuple[str, ...], ours: tuple[str, ...]) -> str | None:
    """The newest version in ``ours`` that the peer also offered."""
    for version in reversed(ours):
        if version in offered:
            return version
    return None
