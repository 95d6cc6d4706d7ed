"""This instance as an owner (DESIGN "Scale-out: any replica, any request"): its identity,
the keys derived from the replicas' shared secret, the HTTP client that forwards to other
instances, and which of them were found unreachable lately.

The rules (session id format, the owner's seal, forward signatures) are pure, in
``gateway.protocol.owner``;
the forwarding itself is ``gateway.http.forward``.
"""

from __future__ import annotations

import secrets
from types import TracebackType
from typing import Any, Final

import anyio
import httpx

from gateway.protocol import owner as owners
from gateway.protocol.owner import Owner

FORWARD_CONNECT_TIMEOUT: Final = 2.0
"""Seconds to connect to an owner. A stopped owner refuses at once; an owner whose address
went dark (a deleted pod) never answers, and instances share a network (ms apart), so one
that has not accepted by then is taken as gone: its client gets 404 and re-initializes."""
FORWARD_ANSWER_CHECK: Final = 10.0
"""Seconds a forward waits for the owner to begin its answer before it asks the owner's
``/healthz`` (on a new connection, within ``FORWARD_CONNECT_TIMEOUT``) whether it lives; then
again every as long. A live owner busy with a long call is waited for; one that accepted and
stopped answering is gone (404 for a session, ``requestState: lost`` for a parked call)."""
FORWARD_WRITE_TIMEOUT: Final = 30.0
"""Seconds to send one chunk of a forwarded request to a live owner."""
FORWARD_MAX_CONNECTIONS: Final = 1024
"""Open connections to other instances at most (each forwarded GET stream holds one)."""
GONE_MEMORY_SECONDS: Final = 30.0
"""An owner found unreachable is answered for at once (404 / lost) this long, so only the
first request for a dark address waits ``FORWARD_CONNECT_TIMEOUT``; short, so a network blip
does not lose a live owner's sessions for long."""
GONE_MEMORY_MAX: Final = 1024
"""Unreachable owners remembered at most (the oldest is forgotten first)."""
BOOT_ID_BYTES: Final = 6
"""Random bytes of an instance's boot id (a restarted instance is a new owner)."""


class OwnerRouting:
    """This instance as an owner: its identity, the keys, and the client that forwards."""

    def __init__(
        self,
        advertise_url: str,
        secret: bytes,
        *,
        max_body_bytes: int,
        label: str | None = None,
        connect_timeout: float = FORWARD_CONNECT_TIMEOUT,
        answer_check: float = FORWARD_ANSWER_CHECK,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.answer_check = answer_check
        self.me = Owner(advertise_url.rstrip("/"), secrets.token_urlsafe(BOOT_ID_BYTES))
        self.label = label  # e.g. "worker 2 of 3", for /status
        self.max_body_bytes = max_body_bytes
        self.state_secret = secret
        self.session_keys = owners.IdKeys.derive(secret, "session id")
        self.forward_key = owners.derive_key(secret, "forward")
        self.task_keys = owners.IdKeys.derive(secret, "task id")  # the owner in task ids (Tasks extension)
        self.state_seal_key = owners.derive_key(secret, "requestState owner seal")
        self._client: httpx.AsyncClient | None = None
        self._gone: dict[str, float] = {}  # owner key → when it was found unreachable (monotonic)
        self.seen = owners.SeenForwards()  # nonces of the forwards accepted lately (no replays)

    def is_gone(self, owner: Owner, now: float) -> bool:
        """``owner`` was found unreachable less than ``GONE_MEMORY_SECONDS`` ago."""
        since = self._gone.get(owner.key)
        if since is None:
            return False
        if now - since < GONE_MEMORY_SECONDS:
            return True
        del self._gone[owner.key]
        return False

    def note_gone(self, owner: Owner, now: float) -> None:
        self._gone.pop(owner.key, None)
        while len(self._gone) >= GONE_MEMORY_MAX:
            del self._gone[next(iter(self._gone))]
        self._gone[owner.key] = now

    def mint_session_id(self) -> str:
        return owners.mint_session_id(self.me, self.session_keys, secrets.token_bytes(owners.SESSION_RANDOM_BYTES))

    def sealed_me(self) -> str:
        """This instance, sealed afresh, for a ``requestState``'s owner claim (opaque to clients)."""
        return owners.seal_owner_text(self.me, self.state_seal_key, secrets.token_bytes(owners.SEAL_NONCE_BYTES))

    def unseal_state_owner(self, sealed: str) -> Owner:
        """The owner a verified ``requestState`` names; ``OwnerError`` when it does not unseal."""
        return owners.unseal_owner_text(sealed, self.state_seal_key)

    def describe(self) -> dict[str, Any]:
        return {"advertise_url": self.me.url, "boot": self.me.boot, "label": self.label}

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(None, connect=self.connect_timeout, write=FORWARD_WRITE_TIMEOUT),
                limits=httpx.Limits(max_connections=FORWARD_MAX_CONNECTIONS, max_keepalive_connections=64),
                trust_env=False,  # a proxy from the environment must not sit between replicas
            )
        return self._client

    async def __aenter__(self) -> OwnerRouting:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._client is not None:
            with anyio.CancelScope(shield=True):
                await self._client.aclose()
            self._client = None
