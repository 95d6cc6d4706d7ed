"""Child calls parked while a modern client answers an MRTR round (digest §1.4, §7.6 C).

A legacy child that asks the client something mid-call keeps that call open; a modern
client can only be asked by ending its response with ``input_required``. So the relay
*parks* the call here — the child exchange with its pool lease, as ``Holdings`` — and
hands the client a signed ``requestState`` (``gateway.protocol.requeststate``).

- ``park`` stores the call under a random state id, starts its keeper in the service's task
  group (``gateway.relay.service``) and returns the token. The keeper waits ``timeout`` seconds for the retry; if none
  comes (or the gateway stops) it answers the child's questions with an error and closes
  the call, which sends the child ``notifications/cancelled``.
- ``take`` verifies a retry's token (signature, expiry, principal, server, method, params
  digest) and hands the call over exactly once; a second use of the same token is
  refused as a replay, and a retry of a call ended before it came (the client's cancel,
  its same request sent again at its cap, another client's fair share, the gateway
  stopping) is told why it ended. Every refusal is a ``Rejection`` (400, -32602) saying why.

The key comes from ``--state-secret-file`` (``gateway.relay.statekeys``: a keyring, re-read
when it changes; tokens are signed with its current key and verified with any of its keys)
so that replicas can verify each other's tokens; without one a random per-process secret is
used, and the first token minted says so: a WARNING when other processes may serve the
endpoint (``replicas``: owner routing, or a bind address a load balancer can reach), else at
INFO — a single local gateway loses only its in-flight rounds on a restart. The parked call
itself lives in this process only; with owner routing (``--advertise-url``) the token names
this instance, sealed (no client reads its address), and a retry that reaches another replica
is forwarded here (``gateway.http.forward``).
"""

from __future__ import annotations

import logging
import secrets
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Final, Protocol, overload

import anyio
from anyio.abc import TaskGroup

from gateway.errors import CODE_INPUT_TIMEOUT
from gateway.protocol import requeststate
from gateway.protocol.jsonrpc import INVALID_PARAMS, JsonId, JsonObject, Request
from gateway.protocol.keyring import Keyring
from gateway.protocol.outcome import Rejection, reject
from gateway.protocol.requeststate import StateClaims, StateError
from gateway.relay.statekeys import StateKeys
from gateway.stdio.ask import ChildAsk
from gateway.stdio.boundary import contained
from gateway.stdio.child import ChildCall, Exchange, StdioChild
from gateway.stdio.pool import PoolLease

log = logging.getLogger("gateway.mrtr")

MAX_PARKED: Final = 1024
"""Parked calls per server at most: each holds a child request open for up to the input
timeout, so clients that never retry must not pile them up; past this, the gateway answers
the child's questions itself and the call goes on."""
USED_IDS_MAX: Final = 100_000
"""Spent state ids remembered (until their expiry) to tell a replay from an unknown token, and
a retry that came too late from one, with why its call ended (one interned reason each)."""
FAIR_SHARE_REASON: Final = (
    "another client's call needed a child that may ask, and this client held more calls waiting for "
    "its answers than that client (fair share)"
)
"""Why a parked call is ended early for another principal's asker (dispatch rule 5)."""
ROUND_PREFIX: Final = "round."
ROOTS_ROUND: Final = "roots"
URL_ROUND: Final = "url"
"""Marks the state id of the gateway's own round (``mint_round``); parked calls' ids are
base64url and never contain a dot."""


class Holdings(list["PoolLease | ChildCall"]):
    """What a child call holds, its pool lease and its child exchange, released last first:
    the part of ``AsyncExitStack`` the relay uses. Unlike the stack, it leaves each with no
    exception and no coroutine (``leave()``, their ``__aexit__`` that never awaits), so it takes
    only the two context managers that neither read nor suppress one nor wait to be left
    (``Pool.lease``'s ``PoolLease``, ``StdioChild.exchange``'s ``ChildCall``): anything else is
    a type error. One is made per call; an ``AsyncExitStack``
    instead costs 0.7 to 2.7 % more instructions per call (``python -m bench.instructions``,
    two A/B runs, C = 1 and 16, both eras; the fence's threshold is 1 %).

    It is the list of what it holds, in the order entered: made and added to without a Python
    call (``Holdings()``, ``hold``: the list's own), as every call does twice. Compared and
    hashed by identity, as the holdings of one call are never those of another."""

    __slots__ = ()
    # One call's holdings, not a value: compared and hashed as an object, as before it was a list.
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__  # type: ignore[assignment]  # a list's is None: an object's kept

    @overload
    async def enter(self, manager: PoolLease) -> StdioChild: ...
    @overload
    async def enter(self, manager: ChildCall) -> Exchange: ...
    async def enter(self, manager: PoolLease | ChildCall) -> StdioChild | Exchange:
        value = await manager.__aenter__()
        self.append(manager)
        return value

    hold = list.append
    """Hold ``manager``, entered already (``enter`` without its coroutine frame)."""

    def pop_all(self) -> Holdings:
        """These holdings, moved to a new object (a parked call's); this one then holds nothing."""
        moved = Holdings(self)
        self.clear()
        return moved

    def close(self) -> None:
        """Leave every context manager, the last entered first; when one raises, the others
        are still left, then the first failure is raised. Synchronous: neither one awaits to
        be left (``leave``, their ``__aexit__`` without its coroutine)."""
        failure: BaseException | None = None
        while self:
            try:
                self.pop().leave()
            except BaseException as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    async def aclose(self) -> None:
        """``close``, for those that leave holdings with ``await``."""
        self.close()

    async def __aenter__(self) -> Holdings:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


@dataclass(slots=True)
class Call:
    """A child call in progress: its exchange, and the holdings that own it and its pool lease."""

    child: StdioChild
    ex: Exchange
    stack: Holdings
    runs_as_task: bool = False  # a task's: its rounds wait --input-timeout for tasks/update, not --round-timeout

    @property
    def method(self) -> str:
        return self.ex.method


@dataclass
class Suspension:
    """One parked call: its questions to the client, by ``inputRequests`` key."""

    state_id: str
    call: Call
    asks: dict[str, ChildAsk]
    expires_at: float
    taken: anyio.Event = field(default_factory=anyio.Event)
    release: Callable[[], None] | None = None  # gives back the principal's request slot it holds
    charged: str = ""  # whose parked call it is (the client key the pool counts it against)
    request_id: JsonId | None = None  # the id of the client's request that was answered input_required
    settled: anyio.Event = field(default_factory=anyio.Event)  # taken, or ended early (``ended``)
    closed: anyio.Event = field(default_factory=anyio.Event)  # its keeper is done: taken, or closed
    ended: str | None = None  # why it was ended before its retry came (``release_oldest``)
    task_request: Request | None = None  # a call to make a task at its retry: as it began (``asks.as_task``)
    method: str = ""  # the parked request's, and the digest of its params (``supersede``)
    digest: str = ""


class ParkedQuota(Protocol):
    """The principals' request limit (``gateway.http.limits.PrincipalQuotas``) as parked calls use it."""

    def hold(self, principal: str) -> Callable[[], None]: ...
    def over_limit(self, principal: str) -> str | None: ...


class Suspensions:
    def __init__(
        self,
        server: str,
        keys: StateKeys | None = None,
        *,
        task_group: TaskGroup,
        quota: ParkedQuota | None = None,
        clock: Callable[[], float] = time.time,
        seal_owner: Callable[[Keyring], str] | None = None,
        replicas: bool = False,
    ) -> None:
        """``keys``: the keyring tokens are signed and verified with (None: a random key of
        this process's own); ``task_group`` runs the keepers (the service's: parked calls end
        with it); ``quota``: parked calls count as their principal's requests in flight (the
        HTTP edge's limits); ``seal_owner``: this instance, sealed afresh for each token with
        the ring's current key (owner routing); ``replicas``: other processes may serve this
        endpoint (module docstring)."""
        self.server = server
        self.seal_owner = seal_owner  # named in each token, so any replica can route the retry here
        self.task_group = task_group
        self.quota = quota
        self._keys = keys if keys is not None else StateKeys.random()
        self._shared_secret = self._keys.shared  # else the first token says so (module docstring)
        self._replicas = replicas
        self._clock = clock
        self._held: dict[str, Suspension] = {}
        # Spent state id → its expiry, and why its call ended with no retry (None: a retry took it).
        self._used: dict[str, tuple[float, str | None]] = {}

    def __len__(self) -> int:
        return len(self._held)

    @property
    def can_park(self) -> bool:
        return len(self._held) < MAX_PARKED

    def park(
        self,
        call: Call,
        asks: dict[str, ChildAsk],
        request: Request,
        principal: str | None,
        timeout: float,
        *,
        charged: str | None = None,
        task_request: Request | None = None,
    ) -> str:
        """Hold ``call`` until its retry or ``timeout``; return the ``requestState`` for the client.
        ``charged``: whose requests in flight it counts as (the client key: an anonymous client's
        peer address), else the principal; ``task_request``: the call becomes a task at its
        retry (``asks.as_task``)."""
        state_id = secrets.token_urlsafe(18)
        expires_at = self._clock() + timeout
        ring = self._keys.ring  # one ring for the owner's seal and the signature
        claims = StateClaims(
            state_id=state_id,
            principal=principal or "",
            server=self.server,
            method=request.method,
            digest=requeststate.params_digest(request.params),
            expires_at=expires_at,
            owner=self.seal_owner(ring) if self.seal_owner is not None else "",
        )
        suspension = Suspension(
            state_id,
            call,
            asks,
            expires_at,
            charged=charged or principal or "anonymous",
            request_id=request.id,
            task_request=task_request,
            method=request.method,
            digest=claims.digest,
        )
        if self.quota is not None:
            suspension.release = self.quota.hold(suspension.charged)
        self._held[state_id] = suspension
        self.task_group.start_soon(self._keeper, suspension, timeout)
        log.info(
            "%s: %s parked for the client's input (%s), up to %g s",
            self.server,
            request.method,
            ", ".join(ask.method for ask in asks.values()),
            timeout,
        )
        return self._signed(claims, ring)

    def _signed(self, claims: StateClaims, ring: Keyring) -> str:
        """``claims`` as a token signed with ``ring``'s current key; the first one signed with a
        random secret says so (module docstring)."""
        if not self._shared_secret:
            self._shared_secret = True  # say it once
            self._note_random_secret()
        return requeststate.encode_state(claims, ring.current)

    def _note_random_secret(self) -> None:
        if self._replicas:
            log.warning(
                "MRTR requestState is signed with a random per-process secret: other replicas will "
                "refuse this gateway's tokens, and a restart invalidates them (set --state-secret-file)"
            )
        else:
            log.info(
                "MRTR requestState is signed with a random per-process secret: a restart invalidates "
                "the tokens of rounds in flight (--state-secret-file keeps them, and is needed for replicas)"
            )

    def take(self, token: str, request: Request, principal: str | None) -> Suspension | Rejection:
        """The parked call a retry resumes, or why the retry is refused."""
        now = self._clock()
        try:
            claims = requeststate.decode_state(token, self._keys.ring.keys, now=now)
        except StateError as exc:
            return _refuse(request.id, exc.message, exc.kind)
        problem = requeststate.binding_problem(
            claims,
            principal=principal or "",
            server=self.server,
            method=request.method,
            digest=requeststate.params_digest(request.params),
        )
        if problem is not None:
            return _refuse(request.id, problem, "mismatch")
        suspension = self._held.pop(claims.state_id, None)
        if suspension is None:
            spent = self._used.get(claims.state_id)
            if spent is not None and spent[1] is not None:  # no retry took it: the client never used it
                message = f"requestState names a call that has ended ({spent[1]}); send the request again without it"
                return _refuse(request.id, message, "unknown")
            if spent is not None:
                return _refuse(request.id, "requestState was already used: each one is good for one retry", "replayed")
            return _refuse(
                request.id,
                "requestState is not held by this gateway: the call it named has ended (timed out, or the gateway "
                "restarted), or another replica issued it",
                "unknown",
            )
        self._spend(claims.state_id, claims.expires_at, now, None)
        suspension.taken.set()
        suspension.settled.set()
        if suspension.release is not None:
            suspension.release()  # the retry holds a slot of its own
        return suspension

    def questions_of(self, token: str) -> list[ChildAsk]:
        """The questions of the call ``token`` parks here and no retry has taken (a task's run
        watches them: the child may withdraw them all); none for any other token."""
        if not token.startswith(requeststate.PREFIX):
            return []
        try:
            claims = requeststate.decode_state(token, self._keys.ring.keys, now=self._clock())
        except StateError:
            return []
        suspension = self._held.get(claims.state_id)
        if suspension is None or suspension.settled.is_set():
            return []
        return list(suspension.asks.values())

    def holds(self, token: str) -> bool:
        """Whether ``token`` (a client's ``requestState``) names a call parked here that no
        retry has taken: while the gateway drains, only such a retry is let in. Not a check of
        the retry itself: ``take`` does that."""
        try:
            claims = requeststate.decode_state(token, self._keys.ring.keys, now=self._clock())
        except StateError:
            return False
        suspension = self._held.get(claims.state_id)
        return suspension is not None and not suspension.settled.is_set()

    def _spend(self, state_id: str, expires_at: float, now: float, ended: str | None) -> None:
        """``state_id`` resumes nothing from now on: taken by a retry (``ended`` None), or its
        call ended with no retry, for the reason ``ended`` (told to a retry that comes late)."""
        if len(self._used) >= USED_IDS_MAX:
            self._used = {k: v for k, v in self._used.items() if v[0] > now}
            while len(self._used) >= USED_IDS_MAX:  # all still live: forget the oldest
                del self._used[next(iter(self._used))]
        self._used[state_id] = (expires_at, None if ended is None else sys.intern(ended))

    async def _keeper(self, suspension: Suspension, timeout: float) -> None:
        """``_keep`` in its own failure domain: a fault ends this parked call only. What it held
        is let go then as at its timeout (``_let_go``), so no child, lease or client slot is
        left held by a call nobody keeps."""
        who = f"{self.server}: the keeper of a parked {suspension.call.method}"
        try:
            with contained(log, who, "that call is ended"):
                await self._keep(suspension, timeout)
                return
            with contained(log, f"{who}, letting its call go", "what is left of that call is dropped"):
                await self._let_go(suspension, "the gateway failed while it held the call")
        finally:
            suspension.closed.set()

    async def _let_go(self, suspension: Suspension, why: str) -> None:
        """After a fault in its keeper: the call no retry took is ended (``_end``)."""
        if suspension.taken.is_set():
            return  # its retry has it: the retry's to end
        await self._end(suspension, why)

    async def _end(self, suspension: Suspension, why: str) -> None:
        """End a parked call no retry took, each step once (a step done already is not done
        again): out of the held calls, its client's slot given back, the call closed (the
        child is told), its questions answered with an error."""
        self._held.pop(suspension.state_id, None)
        release, suspension.release = suspension.release, None
        if release is not None:
            release()
        try:
            with anyio.CancelScope(shield=True):
                await suspension.call.stack.aclose()
        finally:
            # The call is closed first, so its cancel is queued to the child ahead of the
            # answers to its questions: answered first, the child could finish the call
            # (work nobody reads) before the cancel, or not, as the scheduler decides.
            for ask in suspension.asks.values():
                ask.answer_error(CODE_INPUT_TIMEOUT, f"the client did not answer {ask.method}: {why}")
            log.info("%s: parked %s ended: %s", self.server, suspension.call.method, why)

    async def _keep(self, suspension: Suspension, timeout: float) -> None:
        stopping = True
        try:
            with anyio.move_on_after(timeout):
                await suspension.settled.wait()
            stopping = False
        finally:
            if not suspension.taken.is_set():
                why = suspension.ended or (
                    "the gateway is stopping" if stopping else f"no retry came within {timeout:g} s"
                )
                self._spend(suspension.state_id, suspension.expires_at, self._clock(), why)
                await self._end(suspension, why)

    def cancel(self, charged: str, request_id: object) -> bool:
        """A client's ``notifications/cancelled`` naming the request it abandoned in a round:
        the one call of ``charged`` parked for that request id (its JSON type too) ends now, as
        at its timeout. False when none or several match (nothing is ended)."""
        matching = [
            s
            for s in self._held.values()
            if s.charged == charged
            and type(s.request_id) is type(request_id)
            and s.request_id == request_id
            and not s.settled.is_set()
        ]
        if len(matching) != 1:
            return False
        [suspension] = matching
        suspension.ended = "the client cancelled it (notifications/cancelled)"
        suspension.settled.set()
        return True

    def supersede(self, charged: str, request: Request, children: Collection[StdioChild]) -> Suspension | None:
        """End the oldest round of ``charged`` parked on one of ``children`` that ``request`` (a
        new one, with no ``requestState``) sends again: the same method and params
        (``requeststate.params_digest``). For a client at its cap of parked calls: it started
        that call over, so the round it left is not waited out (its keeper ends it, as at its
        timeout; a late retry gets "unknown or used"; ``closed`` says when it is done). Under
        the cap identical rounds coexist (one client's parallel calls). None when none matches."""
        mine = [
            s
            for s in self._held.values()
            if s.charged == charged and s.method == request.method and s.call.child in children
        ]
        if not mine:
            return None
        digest = requeststate.params_digest(request.params)
        same = [s for s in mine if s.digest == digest and not s.settled.is_set()]
        if not same:
            return None
        oldest = min(same, key=lambda s: s.expires_at)
        oldest.ended = "the client sent the same request again, without its requestState"
        oldest.settled.set()
        return oldest

    def release_oldest(self, charged: str, children: Collection[StdioChild], why: str) -> bool:
        """End the oldest call of ``charged`` parked on one of ``children`` (its keeper answers
        the child's questions with an error and closes the call, as at its timeout); False
        when there is none. Its retry then gets the usual "unknown or used" refusal."""
        parked = [
            s
            for s in self._held.values()
            if s.charged == charged and s.call.child in children and not s.settled.is_set()
        ]
        if not parked:
            return False
        oldest = min(parked, key=lambda s: s.expires_at)
        oldest.ended = why
        oldest.settled.set()
        return True

    # -- the gateway's own round: a modern client's roots, before a child is chosen ---------

    def mint_round(self, request: Request, principal: str | None, timeout: float, *, kind: str = ROOTS_ROUND) -> str:
        """A ``requestState`` for the gateway's own MRTR round (``kind``: a client's roots,
        ``gateway.relay.client_roots``, or a server's URLs, ``URL_ROUND``): no call is parked,
        so it names no instance and any replica with the secret takes it."""
        named = "" if kind == ROOTS_ROUND else f"{kind}."  # (a roots round's id as it always was)
        claims = StateClaims(
            state_id=ROUND_PREFIX + named + secrets.token_urlsafe(12),
            principal=principal or "",
            server=self.server,
            method=request.method,
            digest=requeststate.params_digest(request.params),
            expires_at=self._clock() + timeout,
        )
        return self._signed(claims, self._keys.ring)

    def check_round(self, token: str, request: Request, principal: str | None) -> str | Rejection | None:
        """The kind of the round (``ROOTS_ROUND``, ``URL_ROUND``) when ``token`` is a valid
        round's of ``mint_round`` for this retry; None: it is a parked call's (``take`` it); else
        why the retry is refused. A round's token is not single-use: it carries nothing but its
        binding, and a replay can only send the same client's call again."""
        try:
            claims = requeststate.decode_state(token, self._keys.ring.keys, now=self._clock())
        except StateError as exc:
            return _refuse(request.id, exc.message, exc.kind)
        if not claims.state_id.startswith(ROUND_PREFIX):
            return None
        problem = requeststate.binding_problem(
            claims,
            principal=principal or "",
            server=self.server,
            method=request.method,
            digest=requeststate.params_digest(request.params),
        )
        if problem is not None:
            return _refuse(request.id, problem, "mismatch")
        return URL_ROUND if claims.state_id.startswith(ROUND_PREFIX + URL_ROUND + ".") else ROOTS_ROUND


def _refuse(request_id: JsonId, message: str, kind: str) -> Rejection:
    return reject(400, INVALID_PARAMS, message, id=request_id, data={"requestState": kind})


def input_responses(params: JsonObject | None) -> dict[str, JsonObject]:
    """The retry's ``inputResponses`` that are objects (anything else counts as not given)."""
    raw = (params or {}).get("inputResponses")
    if not isinstance(raw, dict):
        return {}
    return {key: value for key, value in raw.items() if isinstance(value, dict)}
