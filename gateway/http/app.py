"""The ASGI application: routes, lifespan, middleware.

``create_app(routers, settings, ...)`` builds a Starlette app serving one MCP endpoint per server
(``/servers/NAME/mcp``, and ``/mcp`` when there is one server),
``/healthz`` (the process and its event loop answer), ``/readyz`` (a child is ready and no
pool is failing; 503 naming the servers that are not, without the reason: it is open to
anyone), ``/status`` (JSON for humans: pools, children, their pids, eras, load, stderr
tails, sessions, listens, parked calls and the recent warnings and errors) and ``/ui`` (the
same, as an HTML page for operators; both take the operator's credential,
``gateway.http.operator``, and ``POST /ui/login`` exchanges it for a cookie). The lifespan
starts the router (the shared pool
pre-warms its children before traffic), opens the task group that runs legacy sessions'
listens and the keepers of parked MRTR calls, and on shutdown ends sessions and parked
calls and stops every child in the spec's order. Every request passes one layer first,
``gateway.http.edge.Edge``: the access log and request metrics, then the checks (headers,
CORS, Origin/Host, authentication, per-principal limits); an MCP endpoint's requests then go
straight to it, and Starlette routes the rest.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import anyio
from prometheus_client import CONTENT_TYPE_LATEST, Gauge, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from gateway import __version__
from gateway.errors import ConfigError
from gateway.http import ui, wire
from gateway.http.auth import LOGIN_PATH, Authentication, TokenStore
from gateway.http.cors import CorsPolicy
from gateway.http.drain import Drain, DrainGuard
from gateway.http.edge import Edge
from gateway.http.edge_settings import EdgeSettings
from gateway.http.endpoint import McpEndpoint
from gateway.http.forward import RouteToOwner
from gateway.http.limits import PrincipalQuotas
from gateway.http.operator import OperatorAccess
from gateway.http.origin import OriginPolicy
from gateway.http.resource import METADATA_PATH, ResourceMetadata
from gateway.oauth.gate import OAuthGate
from gateway.oauth.validation import OAuthPolicy
from gateway.ops.metrics import GatewayMetrics
from gateway.ops.recent import RecentErrors
from gateway.protocol.jsonrpc import error_object
from gateway.relay.exchange import Relay
from gateway.relay.owner import OwnerRouting
from gateway.relay.router import Router
from gateway.relay.sessions import SessionStore
from gateway.relay.suspensions import Suspensions
from gateway.relay.tasks import TaskStore

MAX_LISTED_ENDPOINTS: Final = 20
"""Server names a 404 lists at most: a hint, not an inventory of a big config file."""
SHOWN_PATH_CHARS: Final = 200
"""How much of an unknown path a 404 repeats back."""
DEFAULT_EDGE: Final = EdgeSettings()

if TYPE_CHECKING:  # gateway.http.tls sees uvicorn; the app only passes the subjects on
    from gateway.http.tls import PeerSubjects


def served_endpoints(names: Sequence[str]) -> str:
    """``/mcp``, or ``/servers/{a,b,…}/mcp``: what an unknown path's 404 points to."""
    if len(names) == 1:
        return f"/mcp (also /servers/{names[0]}/mcp)"
    shown = ",".join(names[:MAX_LISTED_ENDPOINTS])
    more = f" and {len(names) - MAX_LISTED_ENDPOINTS} more" if len(names) > MAX_LISTED_ENDPOINTS else ""
    return f"/servers/{{{shown}}}/mcp{more}"


def http_error_handler(names: Sequence[str]) -> Callable[[Request, Exception], Awaitable[Response]]:
    """Starlette's own errors (unknown path, wrong method) as JSON-RPC errors too; a 404
    names the endpoints this gateway does serve."""
    where = served_endpoints(names)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        message = exc.detail
        if exc.status_code == 404:
            message = f"{exc.detail}: nothing at {request.url.path[:SHOWN_PATH_CHARS]}; this gateway serves {where}"
        return wire.error_response(exc.status_code, error_object(-32600, message), headers=dict(exc.headers or {}))

    return http_error


def readiness_word(router: Router) -> str:
    """``NAME failing`` (a pool gave up retrying for now) or ``NAME starting``: no details."""
    failing = any(pool.failing for pool in router.pools.values())
    return f"{router.server.name} {'failing' if failing else 'starting'}"


def create_app(
    routers: Router | Sequence[Router],
    settings: EdgeSettings = DEFAULT_EDGE,
    *,
    tokens: TokenStore | None = None,
    drain: Drain | None = None,
    state_secret: bytes | None = None,
    tls_peers: PeerSubjects | None = None,
    oauth: OAuthGate | None = None,
    owner_routing: OwnerRouting | None = None,
    operator_tokens: TokenStore | None = None,
    operator_scope: str | None = None,
) -> Starlette:
    """One MCP endpoint per router at ``/servers/NAME/mcp``; a single server also at ``/mcp``.

    ``settings``: the edge's limits, origins, identity and metadata settings. The keywords are
    the parts made elsewhere: ``tokens`` (the bearer tokens); ``drain`` (SIGTERM's drain);
    ``state_secret`` signs MRTR ``requestState`` tokens (shared by replicas); None: a random one.
    ``tls_peers``: client-certificate subjects (mutual TLS) that become principals. ``oauth``:
    the token gate; by default built from each server's ``oauth`` policy (raises ``ConfigError``
    when an audience cannot be known).
    ``owner_routing``: sessions and parked calls name this instance, and requests for another
    instance's are forwarded to it (``gateway.http.forward``); its secret signs the tokens.
    ``operator_tokens``, ``operator_scope``: who may read ``/status`` and ``/ui``
    (``gateway.http.operator``; a scope needs OAuth, else ``ConfigError``)."""
    routers = [routers] if isinstance(routers, Router) else list(routers)
    endpoints: list[tuple[Router, McpEndpoint, SessionStore]] = []
    routing = owner_routing
    if routing is not None:
        state_secret = routing.state_secret
    quotas = PrincipalQuotas(
        max_requests=settings.max_requests_per_principal, max_streams=settings.max_streams_per_principal
    )
    for router in routers:
        sessions = SessionStore(
            on_end=router.end_session,
            max_per_principal=router.server.max_sessions_per_principal,
            mint_id=routing.mint_session_id if routing else None,
            resume_window=settings.stream_resume_seconds,
        )
        suspensions = Suspensions(router.server.name, state_secret, owner=routing.me.key if routing else "")
        tasks = TaskStore(
            router.server.name,
            router.server.task_policy(),
            owner=routing.me if routing else None,
            key=routing.task_key if routing else b"",
        )
        suspensions.quota = quotas  # a parked call counts as its principal's request in flight
        endpoint = McpEndpoint(
            Relay(router, gateway_version=__version__, suspensions=suspensions, tasks=tasks),
            sessions,
            max_body_bytes=settings.max_body_bytes,
            max_stream_seconds=settings.max_stream_seconds,
            sse_poll_seconds=settings.sse_poll_seconds,
            body_timeout=settings.body_timeout,
            max_batch_size=router.server.max_batch_size,
        )
        endpoint.unsolicited.attach(router)  # what the children send unasked: GET streams, listens
        endpoints.append((router, endpoint, sessions))

    recent_errors = RecentErrors()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            stack.enter_context(recent_errors.attached())
            if routing is not None:
                await stack.enter_async_context(routing)  # closes the forwarding client last
            await stack.enter_async_context(oauth_gate)  # runs the issuers' key fetches
            # Routers first: their task groups must close after (outside) the one below.
            for router, _, _ in endpoints:
                await stack.enter_async_context(router)
            async with anyio.create_task_group() as tg:
                for _, endpoint, _ in endpoints:
                    endpoint.task_group = tg
                    endpoint.relay.suspensions.task_group = tg  # parked MRTR calls end with the app
                    endpoint.relay.tasks.task_group = tg  # so do the calls running as tasks
                tg.start_soon(end_sessions_when_cancelled)
                try:
                    yield
                finally:
                    for _, _, sessions in endpoints:
                        sessions.end_all()
                    tg.cancel_scope.cancel()

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    drain = drain or Drain()
    stores = {router.server.name: sessions for router, _, sessions in endpoints}
    gateway_metrics = GatewayMetrics(routers, stores.__getitem__) if settings.metrics else None
    if gateway_metrics is not None and routing is not None:  # which replica or worker a scrape reached
        Gauge(
            "mcp_gateway_instance",
            "This instance (1): its advertise URL, boot id and, under --workers, which worker",
            ["advertise_url", "boot", "worker"],
            registry=gateway_metrics.registry,
        ).labels(routing.me.url, routing.me.boot, routing.label or "").set(1)

    async def end_sessions_when_cancelled() -> None:
        await drain.cancel.wait()
        for _, _, sessions in endpoints:
            sessions.end_all()  # closes GET streams; legacy requests in flight end with an error

    async def readyz(request: Request) -> Response:
        """Open to anyone (probes): a status and server names only. Why a server is not ready
        (its last error, which quotes the child's stderr) stays on ``/status``."""
        if drain.draining:
            return PlainTextResponse("not ready: draining\n", status_code=503)
        problems = [readiness_word(router) for router in routers if router.readiness_problem() is not None]
        if not problems:
            return PlainTextResponse("ready\n")
        return PlainTextResponse("not ready: " + "; ".join(problems) + "\n", status_code=503)

    def children_status() -> dict[str, object]:
        budget = routers[0].children  # one budget is shared by every router (server.build_app)
        if budget is None:
            return {}
        return {"children": {"in_service": budget.in_service(), "max": budget.capacity, "evicted": budget.evictions}}

    def status_document() -> dict[str, Any]:
        """What ``/status`` answers and ``/ui`` shows."""
        servers = []
        for router, endpoint, sessions in endpoints:
            server = router.status()
            server["sessions"] = len(sessions)
            server["listens"] = len(endpoint.listens.open)
            server["parked_calls"] = len(endpoint.relay.suspensions)
            server["tasks"] = {"running": endpoint.relay.tasks.live(), "kept": len(endpoint.relay.tasks)}
            servers.append(server)
        return {
            "version": __version__,
            **({"instance": routing.describe()} if routing is not None else {}),
            "sessions": sum(len(sessions) for _, _, sessions in endpoints),
            **children_status(),
            "servers": servers,
            "recent_errors": recent_errors.snapshot(),
        }

    async def status(request: Request) -> Response:
        return wire.json_response(status_document())

    async def ui_page(request: Request) -> Response:
        headers = {"content-security-policy": ui.CONTENT_SECURITY_POLICY, "cache-control": "no-store"}
        return HTMLResponse(ui.render_page(status_document()), headers=headers)

    protected: dict[str, OAuthPolicy | None] = {f"/servers/{r.server.name}/mcp": r.server.oauth for r in routers}
    if len(routers) == 1:
        protected["/mcp"] = routers[0].server.oauth
    oauth = oauth_gate = oauth if oauth is not None else OAuthGate(protected, public_url=settings.public_url)
    resources = ResourceMetadata(
        protected, public_url=settings.public_url, authorization_servers=settings.authorization_servers
    )

    async def protected_resource(request: Request) -> Response:
        """RFC 9728 metadata, so MCP clients can discover where to log in."""
        document = resources.document(request.path_params.get("path", ""), request.scope)
        if document is None:
            return wire.error_response(404, error_object(-32600, "no MCP endpoint at this path"))
        return wire.json_response(document)

    # Every method reaches the endpoint, which answers the ones MCP does not use with a
    # JSON-RPC 405 (Starlette's own would be text/plain).
    def mcp_app(router: Router, endpoint: McpEndpoint) -> ASGIApp:
        # Every HTTP method reaches the endpoint, which answers those MCP does not use with a
        # JSON-RPC 405 (Starlette's own would be text/plain). The drain check is the edge's.
        inner: ASGIApp = endpoint  # a pure ASGI app
        if routing is not None:
            inner = RouteToOwner(
                inner, routing=routing, env_headers=router.server.env_from_headers, body_timeout=settings.body_timeout
            )
        return inner

    lane_apps = {f"/servers/{r.server.name}/mcp": mcp_app(r, e) for r, e, _ in endpoints}
    mcp_paths = {f"/servers/{r.server.name}/mcp": r.server.name for r in routers}
    if len(endpoints) == 1:
        lane_apps["/mcp"] = mcp_app(*endpoints[0][:2])
        mcp_paths["/mcp"] = routers[0].server.name
    # Also routed by Starlette (the edge sends these paths straight to them; the routes answer
    # what reaches the router anyway, such as a path with a root_path).
    routes = [Route(path, DrainGuard(lane, drain=drain), methods=None) for path, lane in lane_apps.items()]
    routes += [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/status", status, methods=["GET"]),
        Route("/ui", ui_page, methods=["GET"]),
    ]
    if resources.enabled:
        routes.append(Route(METADATA_PATH, protected_resource, methods=["GET"]))
        routes.append(Route(METADATA_PATH + "{path:path}", protected_resource, methods=["GET"]))
    if gateway_metrics is not None:
        registry = gateway_metrics.registry

        async def metrics_page(request: Request) -> Response:
            return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

        routes.append(Route("/metrics", metrics_page, methods=["GET"]))
    cors_origins = list(settings.cors_origins)
    tokens = tokens or TokenStore()
    clients_authenticate = tokens.enabled or bool(settings.principal_header) or oauth.enabled or tls_peers is not None
    if operator_scope is not None and not oauth.enabled:
        raise ConfigError("--operator-scope", "needs --oauth-issuer (the scope is one of its access tokens')")
    operator = OperatorAccess(
        operator_tokens or TokenStore(flag="--operator-token"),
        key=state_secret or secrets.token_bytes(32),  # shared by replicas and workers: their cookies agree
        clients_authenticate=clients_authenticate,
        oauth=oauth,
        scope=operator_scope,
    )
    routes.append(Route(LOGIN_PATH, operator.login, methods=["POST"]))
    # One layer, outermost, does every check in order and sends an MCP endpoint's requests
    # straight to it (gateway.http.edge); Starlette's own stack routes the rest. Checks with
    # nothing to do are left out.
    handlers: dict[Any, Any] = {HTTPException: http_error_handler([r.server.name for r in routers])}
    mapped = [header for router in routers for header in router.server.env_from_headers]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)
    app.middleware_stack = Edge(
        app.build_middleware_stack(),
        lanes={path: (name, lane_apps[path]) for path, name in mcp_paths.items()},
        metrics=gateway_metrics,
        cors=CorsPolicy(origins=cors_origins, extra_headers=mapped) if cors_origins else None,
        origins=OriginPolicy(
            loopback_only=settings.loopback_only,
            allowed_origins=[*settings.allowed_origins, *cors_origins],
            allowed_hosts=list(settings.allowed_hosts),
        ),
        auth=Authentication(
            tokens=tokens,
            principal_header=settings.principal_header,
            trusted_proxies=list(settings.trusted_proxies),
            metadata=resources,
            oauth=oauth,
            peers=tls_peers,
        )
        if clients_authenticate
        else None,
        quotas=quotas,
        drain=drain,
        routing=routing,
        body_timeout=settings.body_timeout,
        operator=operator,
    )
    app.state.routers = routers
    app.state.task_stores = {router.server.name: endpoint.relay.tasks for router, endpoint, _ in endpoints}
    app.state.drain = drain
    return app
