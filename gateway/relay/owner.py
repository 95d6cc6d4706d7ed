"""This instance as an owner (DESIGN "Scale-out: any replica, any request"): its identity,
the keys derived from the replicas' shared keyring (``gateway.relay.statekeys``: re-read when
its file changes; each use takes the ring in force once), the HTTP client that forwards to
other instances, and which of them were found unreachable lately.

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
from gateway.protocol import requeststate
from gateway.protocol.keyring import Keyring
from gateway.protocol.owner import IdKeys, Owner
from gateway.relay.statekeys import StateKeys

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
        keys: StateKeys,
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
        self.keys = keys  # the keyring the replicas share: everything below derives from it
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
        keys = owners.id_keys(self.keys.ring, owners.SESSION_IDS)[0]
        return owners.mint_session_id(self.me, keys, secrets.token_bytes(owners.SESSION_RANDOM_BYTES))

    def session_owner(self, session_id: str) -> Owner:
        """The owner a session id names, verified with the ring in force; ``OwnerError`` when it fails."""
        return owners.session_owner(session_id, owners.id_keys(self.keys.ring, owners.SESSION_IDS))

    def task_id_keys(self) -> IdKeys:
        """The keys new task ids are minted with: the current key's."""
        return owners.id_keys(self.keys.ring, owners.TASK_IDS)[0]

    def task_keys(self) -> tuple[IdKeys, ...]:
        """The keys a task id is verified with: every key of the ring, the current one's first."""
        return owners.id_keys(self.keys.ring, owners.TASK_IDS)

    def forward_key(self) -> bytes:
        """The key forwards are signed with: the current key's."""
        return self.keys.ring.derived(owners.FORWARDS)[0]

    def forward_keys(self) -> tuple[bytes, ...]:
        """The keys a forward is verified with: every key of the ring, the current one's first."""
        return self.keys.ring.derived(owners.FORWARDS)

    def sealed_me(self, ring: Keyring) -> str:
        """This instance, sealed afresh with ``ring``'s current key (the one its ``requestState``
        is signed with), for the token's owner claim (opaque to clients)."""
        key = ring.derived(owners.STATE_OWNER_SEAL)[0]
        return owners.seal_owner_text(self.me, key, secrets.token_bytes(owners.SEAL_NONCE_BYTES))

    def state_owner(self, token: str, *, now: float) -> Owner | None:
        """The owner a ``requestState`` names (None: none), verified with the ring in force and
        unsealed with the key that verified it; ``StateError`` or ``OwnerError`` when it fails."""
        ring = self.keys.ring
        claims = requeststate.decode_state(token, ring.keys, now=now)
        if not claims.owner:
            return None
        return owners.unseal_owner_text(claims.owner, ring.derived(owners.STATE_OWNER_SEAL)[claims.signed_by])

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
