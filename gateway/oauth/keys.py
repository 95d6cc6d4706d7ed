"""The issuer's signing keys (JWKS): discovered, fetched without blocking, cached, refreshed.

- **Discovery.** Without ``--oauth-jwks-url`` the ``jwks_uri`` comes from the issuer's
  metadata: RFC 8414 ``/.well-known/oauth-authorization-server`` (inserted before the
  issuer's path), then OpenID Connect ``/.well-known/openid-configuration`` (appended, then
  inserted). The metadata's ``issuer`` must equal the configured one (RFC 8414 §3.3).
- **Fetching** is async (httpx), bounded in time (``FETCH_TIMEOUT``) and size
  (``MAX_DOCUMENT_BYTES``), and runs in the key set's own task group (``async with``): at
  most one fetch at a time, whoever asked for it, and a request that goes away does not
  cancel it.
- **Cold start.** With no keys held, a request starts the fetch (or joins the one running)
  and waits for it once: every concurrent request waits for that same fetch, at most
  ``FETCH_TIMEOUT``, and none starts another after it. A failed fetch is tried again only
  after ``RETRY_INTERVAL``; until then requests are answered at once (503).
- **Stale-while-revalidate.** A key set is due again after ``MAX_AGE``; the first request
  after that starts a refresh in the background and, like every request meanwhile, is
  served with the held keys: requests never wait on a refresh while keys are held, whether
  it runs, hangs or fails (a failed one is tried again after ``RETRY_INTERVAL``). Held keys
  are dropped only ``MAX_STALE`` past their age without a successful refresh (then the next
  request is a cold start), so a key the issuer withdrew stops working as soon as the
  issuer answers, and at the latest after ``MAX_AGE + MAX_STALE``.
- **Unknown ``kid``.** A token naming a key we do not hold triggers one re-fetch (the issuer
  may have rotated), at most once per ``REFRESH_INTERVAL`` counted from the last fetch: a
  stream of tokens with made-up ``kid`` values costs the issuer one request per interval,
  not one per token. Only the request naming the unknown key waits for that fetch (and
  not after it just waited for a cold fetch: one wait per request); every other request
  goes on with the held keys.
- **Kept keys** are signature keys (``use`` absent or ``sig``) of an asymmetric type (RSA, EC,
  OKP). Symmetric (``oct``) keys are dropped: a JWKS is public.

``Unavailable`` is raised when no key set could ever be fetched; the caller answers 503.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
import orjson
from anyio.abc import TaskGroup

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
MAX_STALE: Final = 86400.0
"""Seconds past ``MAX_AGE`` that held keys keep serving while refreshes fail (an issuer outage
of up to a day never stops the gateway); after that they are dropped."""
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
    """One issuer's keys. ``clock`` is monotonic seconds (anyio's by default). Used inside
    ``async with`` (its task group runs the fetches; ``OAuthGate`` enters its key sets)."""

    def __init__(
        self,
        issuer: str,
        jwks_url: str | None = None,
        *,
        clock: Callable[[], float] = anyio.current_time,
        refresh_interval: float = REFRESH_INTERVAL,
        max_age: float = MAX_AGE,
        max_stale: float = MAX_STALE,
    ) -> None:
        self.issuer = issuer
        self.jwks_url = jwks_url
        self.clock = clock
        self.refresh_interval = refresh_interval
        self.max_age = max_age
        self.max_stale = max_stale
        self.keys: dict[str, dict[str, Any]] | None = None
        self.fetches = 0  # key sets fetched successfully (tests count them)
        self.attempts = 0  # fetches started
        self._fresh_until = -math.inf  # the held keys are due for a refresh from then
        self._usable_until = -math.inf  # the held keys are dropped from then
        self._next_attempt = -math.inf  # a failed fetch is not tried again before then
        self._next_kid_refresh = -math.inf  # an unknown kid may cause a fetch again from then
        self._running: anyio.Event | None = None  # set when the fetch under way ends
        self._task_group: TaskGroup | None = None  # while in ``async with``: runs the fetches
        self._lifetime: AbstractAsyncContextManager[None] | None = None

    async def __aenter__(self) -> KeySet:
        running = self._running_fetches()
        await running.__aenter__()
        self._lifetime = running
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        running, self._lifetime = self._lifetime, None
        assert running is not None
        return await running.__aexit__(kind, exc, tb)

    @asynccontextmanager
    async def _running_fetches(self) -> AsyncIterator[None]:
        """The task group the fetches run in, owned by ``async with``; a fetch under way ends
        with the block."""
        async with anyio.create_task_group() as group:
            self._task_group = group
            try:
                yield
            finally:
                self._task_group = None
                group.cancel_scope.cancel()

    def is_due(self) -> bool:
        """The held keys are old enough (or missing) to be fetched again."""
        return self.clock() >= self._fresh_until

    async def key_for(self, kid: str | None) -> Mapping[str, Any] | None:
        """The key named ``kid`` (or the only key, for a token without one); None: unknown."""
        now = self.clock()
        waited = False
        if self.keys is not None and now >= self._usable_until:
            log.error("the signing keys of %s are %.0f s past their age; no longer used", self.issuer, self.max_stale)
            self.keys = None
        if self.keys is None:  # cold: one fetch, waited for once by everyone who needs it
            if self._running is None and now < self._next_attempt:
                raise Unavailable(f"cannot fetch the signing keys of {self.issuer} (tried lately)")
            await self._fetch().wait()
            waited = True
            if self.keys is None:
                raise Unavailable(f"cannot fetch the signing keys of {self.issuer}")
        elif now >= self._fresh_until and self._running is None and now >= self._next_attempt:
            self._fetch()  # revalidate in the background; the held keys keep serving meanwhile
        found = self._pick(kid)
        if found is None and not waited and self.clock() >= self._next_kid_refresh:
            self._next_kid_refresh = self.clock() + self.refresh_interval
            await self._fetch().wait()  # the issuer may have rotated: this request (only) waits
            found = self._pick(kid)
        return found

    def _pick(self, kid: str | None) -> Mapping[str, Any] | None:
        if self.keys is None:
            return None
        if kid is not None:
            return self.keys.get(kid)
        return next(iter(self.keys.values())) if len(self.keys) == 1 else None

    def _fetch(self) -> anyio.Event:
        """The fetch under way, started now if none is."""
        if self._running is not None:
            return self._running
        if self._task_group is None:
            raise RuntimeError("KeySet is used outside `async with` (no task group runs its fetches)")
        done = self._running = anyio.Event()
        self.attempts += 1
        self._task_group.start_soon(self._fetch_now, done)
        return done

    async def _fetch_now(self, done: anyio.Event) -> None:
        try:
            url = self.jwks_url or await self._discover()
            keys = usable_keys(await fetch_json(url))
        except Exception as exc:  # a task of its own: whatever went wrong is logged, never raised
            log.error("cannot fetch the signing keys of %s: %s", self.issuer, exc)
            # Held keys stay in use; either way the issuer is asked again only after a pause.
            self._next_attempt = self.clock() + RETRY_INTERVAL
        else:
            now = self.clock()
            self.keys, self.fetches = keys, self.fetches + 1
            self._fresh_until = now + self.max_age
            self._usable_until = now + self.max_age + self.max_stale
            log.info("fetched %d signing key(s) of %s from %s", len(keys), self.issuer, url)
        finally:
            self._running = None
            done.set()

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
