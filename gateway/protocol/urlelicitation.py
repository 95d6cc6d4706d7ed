"""URL-mode elicitation across the eras, as pure functions (digest §7.6 C, D).

A 2025-11-25 server that needs its user to visit a URL first (an OAuth consent for a
third-party account, a payment page) either asks mid-call (``elicitation/create`` with
``mode: "url"`` and an ``elicitationId``) or ends the request with error **-32042**
(URLElicitationRequired), whose ``data.elicitations`` are such requests; the client shows
them, and sends the request again once the user is done. A modern client never sees -32042
(2026-07-28 servers must not emit it): it takes URL elicitations as MRTR input requests,
without ``elicitationId``.

- ``elicitations``: a -32042 error's URL elicitations, as the modern ``inputRequests`` params
  (``mode``, ``message``, ``url``; the legacy ``elicitationId`` dropped), or None when it
  carries none the gateway can use (more than ``MAX_URL_ELICITATIONS``, or one without an
  absolute URL of at most ``MAX_URL_CHARS`` or without a message).
- ``round_requests``: those as one round's ``inputRequests``, keyed ``url-1``, ``url-2`` …
  (``URL_KEY_PREFIX``). The round is the gateway's own (no child call waits on it); its retry
  sends the original request again (``gateway.relay.steps``).
- ``refusal``: what a retry answered that is not ``accept`` (the user declined, or dismissed
  the page): then the request is not sent again, and ``declined_error`` is the answer.
- ``missing_capability_error`` (-32021) for a request whose ``clientCapabilities`` lack
  ``elicitation.url``; ``unusable_error`` (-31006, the URLs in ``data``) where no round can
  carry them (a request that cannot be answered ``input_required``, or a legacy child's own
  task's outcome, bridged).
- ``for_legacy_client``: a modern child's URL elicitation as a 2025-11-25 client must get it,
  with an ``elicitationId`` (the schema requires one).
- ``undeclared_error``: a -32042 for a legacy session that did not declare ``elicitation.url``
  (-31006, the child's list in ``data``).
- ``question_ids``, ``error_ids``: the ids a legacy child gave a legacy client (mid-call, or in
  a -32042), so that its ``notifications/elicitation/complete`` reaches that client's session;
  ``with_legacy_ids``: a modern child's -32042 given the ids 2025-11-25 requires.
- ``declares_url``: whether a client declared ``elicitation.url``.

Imports: standard library, ``gateway.errors`` and ``gateway.protocol`` only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from gateway.errors import CODE_NO_CLIENT_INPUT, GATEWAY_NAME
from gateway.protocol import inputs
from gateway.protocol.jsonrpc import MISSING_CLIENT_CAPABILITY, URL_ELICITATION_REQUIRED, JsonObject, error_object

ELICITATION: Final = "elicitation/create"
COMPLETE: Final = "notifications/elicitation/complete"
URL_MODE: Final = "url"
URL_KEY_PREFIX: Final = "url-"
"""The ``inputRequests`` keys of a URL round: ``url-1``, ``url-2`` … in the child's order."""
MAX_URL_ELICITATIONS: Final = 8
"""URL elicitations one -32042 may carry into a round; a child's error with more is not
turned into a round (``unusable_error``: a page for the user to visit per entry, so a list
longer than this is not one a person works through)."""
MAX_URL_CHARS: Final = 8192
"""The longest URL passed on to a modern client (each is for a person to open)."""
REQUIRED_CAPABILITY: Final[JsonObject] = {"elicitation": {"url": {}}}
_URI: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:[^\s\x00-\x1f\x7f]+")
"""An absolute URI (the modern schema's ``format: uri``): a scheme, then no space or control
character."""


def _listed(error: Mapping[str, Any]) -> list[Any] | None:
    """A -32042's ``data.elicitations`` as the child sent it (None: not a -32042, or no list)."""
    data = error.get("data") if error.get("code") == URL_ELICITATION_REQUIRED else None
    items = data.get("elicitations") if isinstance(data, dict) else None
    return items if isinstance(items, list) else None


def _is_url_question(method: str, params: JsonObject | None) -> bool:
    return method == ELICITATION and params is not None and params.get("mode") == URL_MODE


def declares_url(capabilities: Mapping[str, Any]) -> bool:
    """Whether a client's capabilities declare URL-mode elicitation (``elicitation.url``)."""
    return inputs.is_declared(capabilities, ELICITATION, {"mode": URL_MODE})


def elicitations(error: Mapping[str, Any]) -> list[JsonObject] | None:
    """A -32042 error's URL elicitations as modern params, in order; None when it is not a
    -32042 or carries none the gateway can pass on."""
    items = _listed(error)
    if not items or len(items) > MAX_URL_ELICITATIONS:
        return None
    found: list[JsonObject] = []
    for item in items:
        if not isinstance(item, dict) or item.get("mode", URL_MODE) != URL_MODE:
            return None
        url, message = item.get("url"), item.get("message")
        if not isinstance(url, str) or not usable_url(url) or not isinstance(message, str):
            return None
        found.append({"mode": URL_MODE, "message": message, "url": url})
    return found


def usable_url(url: str) -> bool:
    """An absolute URI of at most ``MAX_URL_CHARS``, as a modern client's schema has it."""
    return len(url) <= MAX_URL_CHARS and _URI.fullmatch(url) is not None


UNUSABLE_URL: Final = f"its url is not an absolute URI of at most {MAX_URL_CHARS:,} characters"


def unusable_question(method: str, params: JsonObject | None) -> bool:
    """A URL-mode ``elicitation/create`` whose ``url`` a modern client's round cannot carry
    (``usable_url``): the gateway answers the child instead of asking (-31006)."""
    if not _is_url_question(method, params):
        return False
    assert params is not None
    url = params.get("url")
    return not (isinstance(url, str) and usable_url(url))


def round_requests(found: list[JsonObject]) -> dict[str, JsonObject]:
    """One round's ``inputRequests``: each URL elicitation under ``url-N``."""
    return {f"{URL_KEY_PREFIX}{n}": {"method": ELICITATION, "params": params} for n, params in enumerate(found, 1)}


def refusal(responses: Mapping[str, object]) -> str | None:
    """The action of the first answer to a URL round's request that is not ``accept``
    (``decline``, ``cancel``; "no action" for an answer without one), or None."""
    for key, answer in responses.items():
        if not key.startswith(URL_KEY_PREFIX):
            continue
        action = answer.get("action") if isinstance(answer, dict) else None
        if action != "accept":
            return action if isinstance(action, str) else "no action"
    return None


def declined_error(action: str) -> JsonObject:
    return error_object(
        CODE_NO_CLIENT_INPUT,
        f"the user did not complete the server's URL elicitation ({action}), so the request was not sent "
        "to the server again",
        {"source": GATEWAY_NAME, "method": ELICITATION, "action": action},
    )


def missing_capability_error(error: Mapping[str, Any]) -> JsonObject:
    return error_object(
        MISSING_CLIENT_CAPABILITY,
        f"the server needs the user to visit a URL first ({_quoted(error)}), which this request's "
        "clientCapabilities do not declare (elicitation.url)",
        {"requiredCapabilities": REQUIRED_CAPABILITY},
    )


def unusable_error(error: Mapping[str, Any]) -> JsonObject:
    """A -32042 for a modern client where no round can carry it: the gateway's -31006, with
    the URLs (as modern params) in ``data.elicitations`` when they are usable."""
    data: JsonObject = {"source": GATEWAY_NAME, "method": ELICITATION, "requiredCapabilities": REQUIRED_CAPABILITY}
    found = elicitations(error)
    if found is not None:
        data["elicitations"] = found
    return error_object(
        CODE_NO_CLIENT_INPUT,
        f"the server needs the user to visit a URL first ({_quoted(error)}), and the gateway cannot ask for "
        "it here (a round is made only for a tools/call, prompts/get or resources/read answered at once)"
        if found is not None
        else f"the server answered URL elicitation required ({_quoted(error)}) without URL elicitations the "
        f"gateway can pass on (at least one, at most {MAX_URL_ELICITATIONS}, each with a message and an "
        f"absolute url of at most {MAX_URL_CHARS:,} characters)",
        data,
    )


def question_ids(method: str, params: JsonObject | None) -> list[str]:
    """The ``elicitationId`` of a legacy child's URL-mode ``elicitation/create`` to a legacy
    client (none for any other request), so that its ``notifications/elicitation/complete``
    can follow it."""
    eid = params.get("elicitationId") if _is_url_question(method, params) and params is not None else None
    return [eid] if isinstance(eid, str) and eid else []


def error_ids(error: Mapping[str, Any]) -> list[str]:
    """The ``elicitationId`` values of a -32042 ``error``'s list (at most
    ``MAX_URL_ELICITATIONS``), kept for the same reason as ``question_ids``."""
    items = _listed(error) or []
    found = (item.get("elicitationId") for item in items[:MAX_URL_ELICITATIONS] if isinstance(item, dict))
    return [eid for eid in found if isinstance(eid, str) and eid]


def undeclared_error(error: Mapping[str, Any]) -> JsonObject:
    """A -32042 for a legacy session that did not declare ``elicitation.url``: its children are
    told the server's configured capabilities (shared keying), so a child may send one to any
    session, but a server must not use a mode its client did not declare. The gateway's
    -31006, the child's list in ``data.elicitations`` as it was."""
    data: JsonObject = {"source": GATEWAY_NAME, "method": ELICITATION, "requiredCapabilities": REQUIRED_CAPABILITY}
    if (items := _listed(error)) is not None:
        data["elicitations"] = items[:MAX_URL_ELICITATIONS]
    return error_object(
        CODE_NO_CLIENT_INPUT,
        f"the server needs the user to visit a URL first ({_quoted(error)}), and this session did not declare "
        "elicitation.url at initialize",
        data,
    )


def with_legacy_ids(error: JsonObject, new_id: Callable[[], str]) -> JsonObject:
    """A -32042 for a legacy client, each listed elicitation with an ``elicitationId`` (2025-11-25
    requires one; a modern child that emits -32042 anyway, as the Python SDK's may, gives none):
    a missing one is ``new_id()``'s. The error itself when nothing is missing."""
    items = _listed(error)
    if items is None or all(not isinstance(item, dict) or "elicitationId" in item for item in items):
        return error
    data = error["data"]
    filled = [
        {**item, "elicitationId": new_id()} if isinstance(item, dict) and "elicitationId" not in item else item
        for item in items
    ]
    return {**error, "data": {**data, "elicitations": filled}}


def for_legacy_client(method: str, params: JsonObject | None, new_id: Callable[[], str]) -> JsonObject | None:
    """A modern child's question params as a legacy client gets them: a URL-mode elicitation
    with an ``elicitationId`` (``new_id()``'s: required by 2025-11-25; modern ones carry none)."""
    if not _is_url_question(method, params) or params is None or "elicitationId" in params:
        return params
    return {**params, "elicitationId": new_id()}


def _quoted(error: Mapping[str, Any]) -> str:
    message = error.get("message")
    return repr(message[:200]) if isinstance(message, str) else "no message"
