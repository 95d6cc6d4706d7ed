"""The MCP endpoints as the app reaches them: a lane per server, routed to once the service is open.

Starlette fixes an app's routes, and the edge its lanes, when the app is built; the endpoints
are built from the finished service (``gateway.relay.service.open_service``), which only the
app's lifespan opens. So every MCP endpoint path leads to its server's ``Lane``, and the
lifespan opens ``Serving`` with the finished service: each lane's ``app`` is then set, once, to
the endpoint built for its server, and put back to ``not_serving`` (503) when the service
closes. ``/status``, ``/ui`` and ``/metrics`` read the service through ``Serving`` too.
``/readyz`` is 503 whenever no service is open (``is_open``).

The service failing after start-up is the last failure domain: the lifespan tells ``Serving``
(``fail``), and the server, waiting on ``wait_failed``, ends the process with a non-zero code
(``gateway.server``), so that a supervisor replaces it.

The edge calls ``lane.app`` itself (``gateway.http.edge``: no frame more on the hot path);
Starlette's routes call the lane.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import anyio
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.errors import GatewayUnavailableError
from gateway.http.wire import gateway_error_response
from gateway.relay.service import Served, Service
from gateway.relay.sessions import SessionStore

NOT_SERVING = "the gateway is not serving: it is starting or has stopped"


async def not_serving(scope: Scope, receive: Receive, send: Send) -> None:
    """A lane's answer while no service is open (503 + ``Retry-After``)."""
    await gateway_error_response(GatewayUnavailableError(NOT_SERVING, retry_after=1))(scope, receive, send)


class Lane:
    """One server's MCP endpoint: ``app`` is the endpoint's ASGI app while the service is open."""

    __slots__ = ("app", "server")

    def __init__(self, server: str) -> None:
        self.server = server  # its configured name (request metrics are labelled with it)
        self.app: ASGIApp = not_serving

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


class Serving:
    """The open service and the lanes to its endpoints, for the app built before it opened."""

    def __init__(self, servers: Sequence[str]) -> None:
        self.lanes = {server: Lane(server) for server in servers}
        self._service: Service | None = None
        self.failure: BaseException | None = None  # what ended the service after start-up
        self._failed = anyio.Event()

    @property
    def is_open(self) -> bool:
        """A service is open: the lanes lead to its endpoints (else they answer 503)."""
        return self._service is not None

    def fail(self, failure: BaseException) -> None:
        """The open service failed (the lifespan's domain, the last one): nothing restarts it
        in this process, so the process must end (``wait_failed``)."""
        if self.failure is None:
            self.failure = failure
            self._failed.set()

    async def wait_failed(self) -> BaseException:
        """Until the service has failed after start-up; what failed it."""
        await self._failed.wait()
        assert self.failure is not None
        return self.failure

    @contextmanager
    def open(self, service: Service, endpoint: Callable[[Served], ASGIApp]) -> Iterator[None]:
        """Route every lane to ``endpoint(served)`` of its server while the block runs."""
        if self._service is not None:
            raise RuntimeError("the service is open already (an app's lifespan runs once at a time)")
        self._service = service
        for served in service.served:
            self.lanes[served.name].app = endpoint(served)
        try:
            yield
        finally:
            self._service = None
            for lane in self.lanes.values():
                lane.app = not_serving

    @property
    def service(self) -> Service:
        if self._service is None:
            raise RuntimeError("no service is open: the app's lifespan is not running")
        return self._service

    def sessions(self, server: str) -> SessionStore | None:
        """``server``'s legacy sessions; None while no service is open (metrics then leave them out)."""
        return self._service.by_name[server].sessions if self._service is not None else None
