"""The issuer's signing keys (JWKS): discovered, fetched without blocking, cached, refreshed.

- **Discovery.** Without ``--oauth-jwks-url`` the ``jwks_uri`` comes from the issuer's
  metadata: RFC 8414 ``/.well-known/oauth-authorization-server`` (inserted before the
  issuer's path), then OpenID Connect ``/.well-known/openid-configuration`` (appended, then
  inserted). The metadata's ``issuer`` must equal the configured one (RFC 8414 §3.3).
- **Fetching** is async (httpx), bounded in time (``FETCH_TIMEOUT``) and size
  (``MAX_DOCUMENT_BYTES``), and only one fetch runs at a time: concurrent requests that need
  the keys wait for that one.
- **Caching.** The key set is kept for ``MAX_AGE``; an older one is fetched again at the next
  use (so a key the issuer withdrew stops working). A failed fetch is retried after
  ``RETRY_INTERVAL`` and keeps the keys held.
- **Unknown ``kid``.** A token naming a key we do not hold triggers one re-fetch (the issuer
  may have rotated), at most once per ``REFRESH_INTERVAL``: a stream of tokens with made-up
  ``kid`` values costs the issuer one request per interval, not one per token.
- **Kept keys** are signature keys (``use`` absent or ``sig``) of an asymmetric type (RSA, EC,
  OKP). Symmetric (``oct``) keys are dropped: a JWKS is public.

``Unavailable`` is raised when no key set could ever be fetched; the caller answers 503.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
import orjson

log = logging.getLogger("gateway.oauth")

FETCH_TIMEOUT: Final = 10.0
"""Seconds one metadata or JWKS fetch may take, all of it, before it fails."""
MAX_DOCUMENT_BYTES: Final = 512 * 1024
"""Largest metadata or JWKS document read; real ones are a few KiB."""
REFRESH_INTERVAL: Final = 30.0
"""Least seconds between re-fetches caused by tokens naming an unknown ``kid``."""
MAX_AGE: Final = 3600.0
"""Seconds a fetched key set is used before it is fetched again."""
RETRY_INTERVAL: Final = 5.0
"""Least seconds between attempts after a failed fetch (an issuer that is down is not hammered)."""
KEY_TYPES: Final = frozenset({"RSA", "EC", "OKP"})
"""Asymmetric JWK key types; ``oct`` (a shared secret) never verifies an access token."""
MAX_KEYS: Final = 100
"""Keys kept from one JWKS at most."""


class Unavailable(Exception):
    """The issuer's keys cannot be fetched (and none are held)."""


def discovery_urls(issuer: str) -> list[str]:
    """Where the issuer's metadata may be, in the order the MCP authorization spec tries them."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")

    def at(new_path: str) -> str:
        return urlunsplit((parts.scheme, parts.netloc, new_path, "", ""))

    urls = [at("/.well-known/oauth-authorization-server" + path), at(path + "/.well-known/openid-configuration")]
    if path:
        urls.append(at("/.well-known/openid-configuration" + path))
    return urls


def usable_keys(document: Any) -> dict[str, dict[str, Any]]:
    """The signature keys of a JWKS document by ``kid`` (a key without one is keyed ``""``)."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ValueError("not a JWK set (no keys list)")
    keys: dict[str, dict[str, Any]] = {}
    for jwk in document["keys"][:MAX_KEYS]:
        if not isinstance(jwk, dict) or jwk.get("kty") not in KEY_TYPES or jwk.get("use", "sig") != "sig":
            continue
        kid = jwk.get("kid", "")
        if isinstance(kid, str):
            keys.setdefault(kid, jwk)
    return keys


async def fetch_json(url: str) -> Any:
    """GET ``url`` as JSON, bounded in time and size; ``ValueError`` says why it failed."""
    try:
        with anyio.fail_after(FETCH_TIMEOUT):  # the whole fetch, not each read: a slow drip ends too
            body = await _fetch(url)
    except TimeoutError as exc:
        raise ValueError(f"no complete answer within {FETCH_TIMEOUT:g} s") from exc
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValueError("not JSON") from exc


async def _fetch(url: str) -> bytes:
    try:
        async with (
            httpx.AsyncClient(timeout=FETCH_TIMEOUT, follow_redirects=False) as client,
            client.stream("GET", url, headers={"accept": "application/json"}) as response,
        ):
            if response.status_code != 200:
                raise ValueError(f"HTTP {response.status_code}")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise ValueError(f"larger than {MAX_DOCUMENT_BYTES} bytes")
    except httpx.HTTPError as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from exc
    return bytes(body)


class KeySet:
    """One issuer's keys. ``clock`` is monotonic seconds (anyio's by default)."""

    def __init__(
        self,
        issuer: str,
        jwks_url: str | None = None,
        *,
        clock: Callable[[], float] = anyio.current_time,
        refresh_interval: float = REFRESH_INTERVAL,
        max_age: float = MAX_AGE,
    ) -> None:
        self.issuer = issuer
        self.jwks_url = jwks_url
        self.clock = clock
        self.refresh_interval = refresh_interval
        self.max_age = max_age
        self.keys: dict[str, dict[str, Any]] | None = None
        self.fetches = 0  # key sets fetched successfully (tests count them)
        self._attempts = 0  # fetch attempts: a request that waited for one sees it changed
        self._next_fetch = -math.inf  # when the held keys are due again (or the failed fetch may be retried)
        self._next_kid_refresh = -math.inf  # when an unknown kid may cause a fetch again
        self._lock = anyio.Lock()

    def is_due(self) -> bool:
        """The held keys are old enough (or missing) to be fetched at the next lookup."""
        return self.clock() >= self._next_fetch

    async def key_for(self, kid: str | None) -> Mapping[str, Any] | None:
        """The key named ``kid`` (or the only key, for a token without one); None: unknown."""
        if self.is_due():
            await self._refresh(self._attempts)
        if self.keys is None:
            raise Unavailable(f"cannot fetch the signing keys of {self.issuer}")
        found = self._pick(kid)
        if found is None and self.clock() >= self._next_kid_refresh:
            self._next_kid_refresh = self.clock() + self.refresh_interval
            await self._refresh(self._attempts)  # the issuer may have rotated its keys
            found = self._pick(kid)
        return found

    def _pick(self, kid: str | None) -> Mapping[str, Any] | None:
        if self.keys is None:
            return None
        if kid is not None:
            return self.keys.get(kid)
        return next(iter(self.keys.values())) if len(self.keys) == 1 else None

    async def _refresh(self, seen: int) -> None:
        async with self._lock:
            if self._attempts != seen:
                return  # another request fetched while this one waited: use its result
            self._attempts += 1
            try:
                # Shielded: the request that started the fetch may go away, but the requests
                # waiting on the lock need its result. Each fetch is bounded by FETCH_TIMEOUT.
                with anyio.CancelScope(shield=True):
                    url = self.jwks_url or await self._discover()
                    keys = usable_keys(await fetch_json(url))
            except ValueError as exc:
                log.error("cannot fetch the signing keys of %s: %s", self.issuer, exc)
                # Held keys stay in use; either way the issuer is asked again only after a pause.
                self._next_fetch = self.clock() + RETRY_INTERVAL
                return
            self.keys, self.fetches = keys, self.fetches + 1
            self._next_fetch = self.clock() + self.max_age
            log.info("fetched %d signing key(s) of %s from %s", len(keys), self.issuer, url)

    async def _discover(self) -> str:
        problems = []
        for url in discovery_urls(self.issuer):
            try:
                metadata = await fetch_json(url)
            except ValueError as exc:
                problems.append(f"{url}: {exc}")
                continue
            if not isinstance(metadata, dict) or metadata.get("issuer") != self.issuer:
                problems.append(f"{url}: its issuer is not {self.issuer}")
                continue
            jwks_uri = metadata.get("jwks_uri")
            if not isinstance(jwks_uri, str) or not jwks_uri:
                problems.append(f"{url}: no jwks_uri")
                continue
            self.jwks_url = jwks_uri  # the metadata is not fetched again
            return jwks_uri
        raise ValueError("no usable metadata (" + "; ".join(problems) + ")")
