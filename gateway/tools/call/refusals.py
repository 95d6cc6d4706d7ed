"""Answers that refuse ``call`` itself rather than its request, and the URL to suggest.

Contract:

* ``refusal`` says why an answer refuses the endpoint (401, 403, a wrong path's 404, a
  redirect, a gateway-local error to the handshake or a start error a gateway's
  ``server/discover`` names), with a hint; None when it does not.
* ``suggested_url`` is the "did you mean …?" of a 404. When the 404 comes from this
  gateway, its message names the endpoints it serves (``this gateway serves /mcp (also
  /servers/NAME/mcp)`` or ``/servers/{a,b,…}/mcp``, see ``gateway.http.app.served_endpoints``):
  the suggestion is the served path closest to the typed one (``/mpc`` → ``/mcp``,
  ``/servers/fils/mcp`` → ``/servers/files/mcp``) when one is alike (``PATH_LIKENESS``);
  otherwise, for a path like none of them (``/sse``, an HTTP+SSE client's habit), the endpoint
  itself: ``/mcp`` when the gateway serves one server, else its ``/servers/NAME/mcp`` paths
  (the first ``MAX_SUGGESTED_PATHS``).
* From any other server: a last path segment that looks like a typo of ``mcp`` (``mpc``,
  ``mcpp``) is replaced by ``mcp``; otherwise ``/mcp`` is appended. A path that already ends
  in ``/mcp`` gets no suggestion (there is nothing better to guess).

Pure: no I/O. Imports ``httpx`` for URL parsing only, and ``gateway.protocol``.
"""

from __future__ import annotations

import difflib
import re
from typing import Final

import httpx

from gateway.protocol import handshake, jsonrpc
from gateway.protocol.bridge import CHILD_META
from gateway.protocol.jsonrpc import ErrorReply, Reply, Result

MCP_SEGMENT: Final = "mcp"
SEGMENT_LIKENESS: Final = 0.6
"""How alike (``difflib`` ratio) a last segment must be to ``mcp`` to be taken for a typo of it."""
PATH_LIKENESS: Final = 0.6
"""How alike (``difflib`` ratio) a typed path must be to a served one to be taken for a typo of it."""
MAX_SUGGESTED_PATHS: Final = 3
"""Served endpoints offered at most when the typed path is like none of them."""
MAX_SERVED_PATHS: Final = 100
"""Paths read from one 404 message at most (the gateway lists 20; a hostile body may list more)."""

SHOWN_BODY_CHARS: Final = 300
"""How much of a non-MCP answer's body an error message quotes."""
REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
"""Answers that send the client elsewhere (``/mcp/`` → ``/mcp``): followed once to the same
origin (``gateway.tools.call.connection``), else reported with the URL to use."""
GATEWAY_CODES: Final = range(-31999, -30999)
"""Gateway-local JSON-RPC codes (``gateway.errors``): the gateway, not its server, failed."""

_SERVES: Final = re.compile(r"this gateway serves (.+)$")
_BRACES: Final = re.compile(r"^(/servers/)\{([^}]*)\}(/mcp)$")


def served_paths(message: str) -> list[str]:
    """The endpoint paths a gateway's 404 message names, in its order (none from other servers)."""
    found = _SERVES.search(message)
    if found is None:
        return []
    paths: list[str] = []
    for word in re.split(r"[\s()]+", found.group(1)):
        braces = _BRACES.match(word)
        if braces is not None:
            paths += [f"{braces[1]}{name}{braces[3]}" for name in braces[2].split(",") if name]
        elif word.startswith("/") and word.endswith("/mcp"):
            paths.append(word)
    return paths[:MAX_SERVED_PATHS]


def suggested_url(url: str, said: str = "") -> str | None:
    """The URL most likely meant (several joined by " or " when a gateway serves several and
    none is like the typed one), or None when the typed one is already as good a guess."""
    parsed = httpx.URL(url)
    path = parsed.path.rstrip("/")
    served = served_paths(said)
    if served:
        if path in served:
            return None
        return " or ".join(str(parsed.copy_with(path=p, query=None, fragment=None)) for p in _closest(path, served))
    if path.endswith(f"/{MCP_SEGMENT}"):
        return None
    head, _, last = path.rpartition("/")
    if last and difflib.SequenceMatcher(None, last, MCP_SEGMENT).ratio() >= SEGMENT_LIKENESS:
        path = head  # a typo of "mcp": replace it rather than append
    return str(parsed.copy_with(path=f"{path}/{MCP_SEGMENT}", query=None, fragment=None))


def _closest(path: str, served: list[str]) -> list[str]:
    """The served path ``path`` is a typo of, else the endpoint itself: ``/mcp`` when served
    (it comes first in a gateway's list), else the first few ``/servers/NAME/mcp``."""
    best = max(served, key=lambda candidate: difflib.SequenceMatcher(None, path, candidate).ratio())
    if difflib.SequenceMatcher(None, path, best).ratio() >= PATH_LIKENESS:
        return [best]
    return ["/mcp"] if "/mcp" in served else served[:MAX_SUGGESTED_PATHS]


def refusal(
    url: str,
    status: int,
    reply: Reply | None,
    body: str,
    *,
    method: str,
    has_token: bool = False,
    in_session: bool = False,
    location: str | None = None,
) -> str | None:
    """Why the endpoint refused us (not the request), with a hint; None when it did not.

    HTTP 401/403, a 404 that is not "method not found" outside a legacy session (inside one
    a 404 means the session is gone, which the caller reports), a redirect (``connection``
    follows one to the same origin first), and a gateway-local error to the handshake (the
    gateway cannot start its server; later ones are the call's own)."""
    said = reply.message if isinstance(reply, ErrorReply) else " ".join(body.split())[:SHOWN_BODY_CHARS]
    said = f": {said}" if said else ""
    if status == 401:
        hint = (
            "the token given with --header was not accepted"
            if has_token
            else "pass --header 'Authorization: Bearer TOKEN'"
        )
        return f"{url} requires authorization (HTTP 401{said}); {hint}"
    if status == 403:
        return f"{url} refused this client (HTTP 403{said})"
    method_not_found = isinstance(reply, ErrorReply) and reply.code == jsonrpc.METHOD_NOT_FOUND
    if status == 404 and not method_not_found and not in_session:
        suggestion = suggested_url(url, said)
        hint = f"; did you mean {suggestion}?" if suggestion else ""
        return f"nothing answers MCP at {url} (HTTP 404{said}){hint}"
    if status in REDIRECTS:
        where = f"redirects to {location}" if location else "redirects without a Location"
        return f"{url} {where} (HTTP {status}); call that URL instead"
    opening = method in (handshake.DISCOVER, handshake.INITIALIZE)
    if opening and isinstance(reply, ErrorReply) and reply.code in GATEWAY_CODES:
        return f"{url} could not answer {method}{said}"
    start_error = _start_error(reply) if method == handshake.DISCOVER else None
    if start_error is not None:
        return f"{url} answers, but its server cannot start: {start_error}"
    return None


def _start_error(reply: Reply | None) -> str | None:
    """The start error a gateway names in its ``server/discover`` result while its server
    cannot start (``gateway.protocol.bridge.unavailable_discover``), else None."""
    meta = reply.result.get("_meta") if isinstance(reply, Result) else None
    child = meta.get(CHILD_META) if isinstance(meta, dict) else None
    error = child.get("error") if isinstance(child, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) else None
