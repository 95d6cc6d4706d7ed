"""The ASGI application: the edge, the routes and the lifespan that opens the service.

``create_app(routers, settings, ...)`` builds a Starlette app serving one MCP endpoint per
server (``/servers/NAME/mcp``, and ``/mcp`` when there is one server) and the pages beside
them (``gateway.http.routes``). It builds the HTTP side only:

- **the edge** (``build_edge``): every request passes one layer first,
  ``gateway.http.edge.Edge``: the access log and request metrics, then the checks (headers,
  CORS, Origin/Host, authentication, per-principal limits); an MCP endpoint's requests then go
  straight to their lane, and Starlette routes the rest;
- **the routes** (``gateway.http.routes.build_routes``), over the lanes of ``Serving``
  (``gateway.http.lanes``);
- **the lifespan**: it enters owner routing and the OAuth gate (its key fetches), then opens
  the relay's service (``gateway.relay.service.open_service``: it runs the routers, whose
  shared pools pre-warm their children before traffic, and builds every server's relay in
  the service's task group), builds each server's ``McpEndpoint`` from the finished
  ``Served`` and opens ``Serving`` with them. On shutdown it closes them in reverse: the
  lanes answer 503, every session and parked call ends, and every child stops in the spec's
  order. ``Drain.cancel`` (the drain budget spent) ends every session at once. A failure
  that ends the service after start-up is logged, told to ``Serving`` (``fail``: ``/readyz``
  answers 503 and ``gateway.server`` exits non-zero) and raised on to the ASGI server.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import Gauge
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp

from gateway import __version__
from gateway.errors import ConfigError
from gateway.http.auth import Authentication, TokenStore
from gateway.http.cors import CorsPolicy
from gateway.http.drain import Drain, DrainedQuota
from gateway.http.edge import Edge
from gateway.http.edge_settings import EdgeSettings, default_max_connections
from gateway.http.endpoint import McpEndpoint
from gateway.http.forward import RouteToOwner
from gateway.http.lanes import Serving
from gateway.http.limits import OpenConnections, PrincipalQuotas
from gateway.http.operator import OperatorAccess
from gateway.http.origin import OriginPolicy
from gateway.http.resource import ResourceMetadata
from gateway.http.routes import MAX_LISTED_ENDPOINTS as MAX_LISTED_ENDPOINTS
from gateway.http.routes import build_routes, http_error_handler, mcp_paths, ops_app
from gateway.http.routes import served_endpoints as served_endpoints
from gateway.oauth.gate import OAuthGate
from gateway.oauth.policy import OAuthPolicy
from gateway.ops.metrics import ConnectionMetrics, GatewayMetrics, StateKeyMetrics, label_value
from gateway.ops.recent import RecentErrors
from gateway.ops.tracing import Tracer
from gateway.relay.owner import OwnerRouting
from gateway.relay.router import Router
from gateway.relay.service import Served, open_service
from gateway.relay.statekeys import StateKeys

DEFAULT_EDGE: Final = EdgeSettings()

log = logging.getLogger("gateway")

if TYPE_CHECKING:  # gateway.http.tls sees uvicorn; the app only passes the subjects on
    from gateway.http.tls import PeerSubjects


def create_app(
    routers: Router | Sequence[Router],
    settings: EdgeSettings = DEFAULT_EDGE,
    *,
    tokens: TokenStore | None = None,
    drain: Drain | None = None,
    state_keys: StateKeys | None = None,
    tls_peers: PeerSubjects | None = None,
    oauth: OAuthGate | None = None,
    owner_routing: OwnerRouting | None = None,
    operator_tokens: TokenStore | None = None,
    operator_scope: str | None = None,
    tracer: Tracer | None = None,
    connections: OpenConnections | None = None,
) -> Starlette:
    """One MCP endpoint per router at ``/servers/NAME/mcp``; a single server also at ``/mcp``.

    ``settings``: the edge's limits, origins, identity and metadata settings. The keywords are
    the parts made elsewhere: ``tokens`` (the bearer tokens); ``drain`` (SIGTERM's drain);
    ``state_keys``: the keyring (``--state-secret-file``, shared by replicas, re-read while the
    app runs) that signs MRTR ``requestState`` tokens and ``/ui`` cookies; None: a random key.
    ``tls_peers``: client-certificate subjects (mutual TLS) that become principals. ``oauth``:
    the token gate; by default built from each server's ``oauth`` policy (raises ``ConfigError``
    when an audience cannot be known).
    ``owner_routing``: sessions and parked calls name this instance, and requests for another
    instance's are forwarded to it (``gateway.http.forward``); its secret signs the tokens.
    ``operator_tokens``, ``operator_scope``: who may read ``/status`` and ``/ui``
    (``gateway.http.operator``; a scope needs OAuth, else ``ConfigError``). ``tracer``: a span
    per MCP request (``gateway.ops.tracing``; None: tracing is off), run by the lifespan.
    ``connections``: the listener's connection count (None: a new one, capped at
    ``settings.max_connections`` or ``default_max_connections``), which ``gateway.server.run``
    gives the protocol class and ``/metrics`` reads.

    The routers are run by the app's lifespan (not entered before)."""
    routers = [routers] if isinstance(routers, Router) else list(routers)
    routing = owner_routing
    if routing is not None:
        state_keys = routing.keys
    keys = state_keys if state_keys is not None else StateKeys.random()
    drain = drain or Drain()
    quotas = PrincipalQuotas(
        max_requests=settings.max_requests_per_principal, max_streams=settings.max_streams_per_principal
    )
    serving = Serving([router.server.name for router in routers])
    recent_errors = RecentErrors()
    metrics = GatewayMetrics(routers, serving.sessions, version=__version__) if settings.metrics else None
    if metrics is not None and routing is not None:  # which replica or worker a scrape reached
        Gauge(
            "mcp_gateway_instance",
            "This instance (1): its advertise URL, boot id and, under --workers, which worker",
            ["advertise_url", "boot", "worker"],
            registry=metrics.registry,
        ).labels(routing.me.url, routing.me.boot, label_value(routing.label or "")).set(1)
    # The listener's connections against --max-connections: ``gateway.server.run`` gives this
    # count to the protocol class it serves with, /metrics reads it.
    if connections is None:
        connections = OpenConnections(settings.max_connections or default_max_connections())
    if metrics is not None:
        metrics.register(StateKeyMetrics(keys), "state_keys")
        metrics.register(ConnectionMetrics(connections.snapshot), "connections")
    protected: dict[str, OAuthPolicy | None] = {f"/servers/{r.server.name}/mcp": r.server.oauth for r in routers}
    if len(routers) == 1:
        protected["/mcp"] = routers[0].server.oauth
    gate = oauth if oauth is not None else OAuthGate(protected, public_url=settings.public_url)
    resources = ResourceMetadata(
        protected, public_url=settings.public_url, authorization_servers=settings.authorization_servers
    )
    tokens = tokens or TokenStore()
    clients_authenticate = tokens.enabled or bool(settings.principal_header) or gate.enabled or tls_peers is not None
    if operator_scope is not None and not gate.enabled:
        raise ConfigError("--operator-scope", "needs --oauth-issuer (the scope is one of its access tokens')")
    operator = OperatorAccess(
        operator_tokens or TokenStore(flag="--operator-token"),
        keys=keys,  # shared by replicas and workers: their cookies agree
        clients_authenticate=clients_authenticate,
        oauth=gate,
        scope=operator_scope,
    )

    def endpoint_app(served: Served) -> ASGIApp:
        """A server's endpoint as its lane's app: the endpoint, behind owner routing when on."""
        endpoint: ASGIApp = McpEndpoint(
            served,
            max_body_bytes=settings.max_body_bytes,
            max_stream_seconds=settings.max_stream_seconds,
            sse_poll_seconds=settings.sse_poll_seconds,
            body_timeout=settings.body_timeout,
            max_batch_size=served.router.server.max_batch_size,
        )
        if routing is None:
            return endpoint
        env_headers = served.router.server.env_from_headers
        return RouteToOwner(endpoint, routing=routing, env_headers=env_headers, body_timeout=settings.body_timeout)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        started = False
        try:
            async with AsyncExitStack() as stack:
                await open_all(app, stack)
                started = True
                yield
        except Exception as exc:  # the last failure domain: the process is to end (gateway.server)
            if started:
                log.critical("the service failed after start-up; the gateway stops", exc_info=exc)
                serving.fail(exc)
            raise

    async def open_all(app: Starlette, stack: AsyncExitStack) -> None:
        """What the lifespan opens, in order; ``stack`` closes it in reverse."""
        stack.enter_context(recent_errors.attached())
        if tracer is not None:  # entered first, so shut down (flushed) last: after every request's end
            stack.enter_context(tracer.running())
        await stack.enter_async_context(keys.watching())  # re-read when the file changes
        if routing is not None:
            await stack.enter_async_context(routing)  # closes the forwarding client last
        await stack.enter_async_context(gate)  # runs the issuers' key fetches
        service = await stack.enter_async_context(
            open_service(
                routers,
                gateway_version=__version__,
                state_keys=keys,
                routing=routing,
                # A parked call counts as its principal's request in flight, and the drain waits for it.
                quota=DrainedQuota(quotas, drain),
                resume_window=settings.stream_resume_seconds,
                end_sessions_when=drain.cancel,  # GET streams close; legacy requests end with an error
                replicas=not settings.loopback_only,  # reachable by a load balancer: maybe one of several
                drain=drain,  # waits for the tasks
            )
        )
        stack.enter_context(serving.open(service, endpoint_app))
        app.state.service = service  # for tests and tools that look inside
        app.state.state_keys = keys
        app.state.task_stores = {served.name: served.relay.tasks for served in service.served}

    routes = build_routes(
        routers,
        serving,
        drain=drain,
        routing=routing,
        state_keys=keys,
        recent_errors=recent_errors,
        resources=resources,
        metrics=metrics,
        operator=operator,
    )
    handlers: dict[Any, Any] = {HTTPException: http_error_handler([r.server.name for r in routers])}
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)
    app.middleware_stack = build_edge(  # fenced: Starlette.middleware_stack
        app.build_middleware_stack(),
        routers,
        serving,
        settings,
        tokens=tokens,
        drain=drain,
        quotas=quotas,
        metrics=metrics,
        routing=routing,
        oauth=gate,
        resources=resources,
        tls_peers=tls_peers,
        operator=operator,
        clients_authenticate=clients_authenticate,
        tracer=tracer,
    )
    app.state.routers = routers
    app.state.connections = connections
    app.state.drain = drain
    app.state.serving = serving
    app.state.ops_app = ops_app(routers, serving, drain=drain, metrics=metrics)  # served with --ops-listen
    return app


def build_edge(
    inner: ASGIApp,
    routers: Sequence[Router],
    serving: Serving,
    settings: EdgeSettings,
    *,
    tokens: TokenStore,
    drain: Drain,
    quotas: PrincipalQuotas,
    metrics: GatewayMetrics | None,
    routing: OwnerRouting | None,
    oauth: OAuthGate,
    resources: ResourceMetadata,
    tls_peers: PeerSubjects | None,
    operator: OperatorAccess,
    clients_authenticate: bool,
    tracer: Tracer | None = None,
) -> Edge:
    """The one layer, outermost, that does every check in order and sends an MCP endpoint's
    requests straight to its lane (``gateway.http.edge``); ``inner``, Starlette's own stack,
    routes the rest. Checks with nothing to do are left out."""
    cors_origins = list(settings.cors_origins)
    mapped = [header for router in routers for header in router.server.env_from_headers]
    return Edge(
        inner,
        lanes={path: serving.lanes[name] for path, name in mcp_paths(routers).items()},
        metrics=metrics,
        cors=CorsPolicy(origins=cors_origins, extra_headers=mapped) if cors_origins else None,
        origins=OriginPolicy(
            loopback_only=settings.loopback_only,
            allowed_origins=[*settings.allowed_origins, *cors_origins],
            allowed_hosts=list(settings.allowed_hosts),
        ),
        auth=Authentication(
            tokens=tokens,
            principal_header=settings.principal_header,
            header_required=header_required(settings, others=tokens.enabled or oauth.enabled or tls_peers is not None),
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
        tracer=tracer,
    )


def header_required(settings: EdgeSettings, *, others: bool) -> bool:
    """Whether a request without the principal header from a trusted proxy gets 401
    (``--principal-header-required``): ``auto`` is yes when nothing else authenticates
    clients (``others``: tokens, OAuth, client certificates), so a proxy-authenticated
    gateway fails closed instead of serving the request as ``anonymous``."""
    policy = settings.principal_header_required
    return settings.principal_header is not None and (policy == "yes" or (policy == "auto" and not others))
