"""The app's routes: the MCP endpoints' lanes and the pages beside them.

``build_routes`` makes Starlette's routes: every MCP endpoint path (``/servers/NAME/mcp``, and
``/mcp`` when there is one server) to its server's lane (``gateway.http.lanes``) behind the
drain check, ``/healthz`` (the process and its event loop answer), ``/readyz`` (whether this
replica can serve, by ``gateway.relay.readiness``'s rules: 503 when draining, when a required
server is not ready, when none is; the servers that are not ready are named either way,
without the reason: it is open to anyone), ``/status`` (JSON for humans: pools, children, their pids, eras, load,
stderr tails, sessions, listens, parked calls and the recent warnings and errors), ``/ui``
(the same, as an HTML page for operators; both take the operator's credential,
``gateway.http.operator``, and ``POST /ui/login`` exchanges it for a cookie), the RFC 9728
metadata when OAuth guards an endpoint, and ``/metrics`` unless ``--no-metrics``. ``ops_app`` is
the ops listener's app (``--ops-listen``): ``/healthz``, ``/readyz`` and ``/metrics`` alone. The edge
(``gateway.http.edge``) sends the MCP paths straight to their lane; the routes answer what
reaches Starlette anyway, such as a path with a root_path.

Each server's part of ``/status`` and ``/ui`` is read in a failure domain of its own
(``_server_status``): a fault reading one server (a gateway bug) shows that server with
``"state": "unknown"`` and its ``status_error``, logged once (an ERROR with its traceback,
again only after it has worked in between), and every other server as always. Before, one
such fault answered the whole page with a 500.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any, Final

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from gateway import __version__
from gateway.http import ui, wire
from gateway.http.auth import LOGIN_PATH
from gateway.http.drain import Drain, DrainGuard
from gateway.http.lanes import Serving
from gateway.http.operator import OperatorAccess
from gateway.http.resource import METADATA_PATH, ResourceMetadata
from gateway.ops.metrics import GatewayMetrics
from gateway.ops.recent import RecentErrors
from gateway.protocol.jsonrpc import error_object
from gateway.relay.owner import OwnerRouting
from gateway.relay.readiness import Readiness, replica_readiness, required_names
from gateway.relay.router import Router
from gateway.relay.service import Served
from gateway.relay.statekeys import StateKeys

log = logging.getLogger("gateway.status")

MAX_LISTED_ENDPOINTS: Final = 20
"""Server names a 404 lists at most: a hint, not an inventory of a big config file."""
SHOWN_PATH_CHARS: Final = 200
"""How much of an unknown path a 404 repeats back."""


def mcp_paths(routers: Sequence[Router]) -> dict[str, str]:
    """Every MCP endpoint path and the server it serves."""
    paths = {f"/servers/{r.server.name}/mcp": r.server.name for r in routers}
    if len(routers) == 1:
        paths["/mcp"] = routers[0].server.name
    return paths


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

    return _json_rpc_errors(lambda path: f"nothing at {path[:SHOWN_PATH_CHARS]}; this gateway serves {where}")


def _json_rpc_errors(not_found: Callable[[str], str]) -> Callable[[Request, Exception], Awaitable[Response]]:
    """Starlette's ``HTTPException`` as a JSON-RPC error; a 404's message says ``not_found(path)``."""

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        message = exc.detail
        if exc.status_code == 404:
            message = f"{exc.detail}: {not_found(request.url.path)}"
        return wire.error_response(exc.status_code, error_object(-32600, message), headers=dict(exc.headers or {}))

    return http_error


def readiness(routers: Sequence[Router]) -> Readiness:
    """Whether this replica can serve, by ``gateway.relay.readiness``'s rules (the drain aside)."""
    required = required_names([(r.server.name, r.server.ready_required) for r in routers])
    return replica_readiness([r.readiness(required=r.server.name in required) for r in routers])


def status_document(
    routers: Sequence[Router],
    serving: Serving,
    routing: OwnerRouting | None,
    recent_errors: RecentErrors,
    state_keys: StateKeys | None,
    failing: set[str],
) -> dict[str, Any]:
    """What ``/status`` answers and ``/ui`` shows. ``failing``: the servers whose part failed
    last time (module docstring)."""
    service = serving.service
    required = required_names([(r.server.name, r.server.ready_required) for r in routers])
    servers = [_server_status(served, required, failing) for served in service.served]
    budget = routers[0].children  # one budget is shared by every router (server.build_app)
    children = (
        {"children": {"in_service": budget.in_service(), "max": budget.capacity, "evicted": budget.evictions}}
        if budget is not None
        else {}
    )
    return {
        "version": __version__,
        **({"instance": routing.describe()} if routing is not None else {}),
        **({"state_keys": state_keys.describe()} if state_keys is not None else {}),
        "sessions": sum(len(served.sessions) for served in service.served),
        **children,
        "servers": servers,
        "recent_errors": recent_errors.snapshot(),
    }


def _server_status(served: Served, required: Collection[str], failing: set[str]) -> dict[str, Any]:
    """One server's part of ``/status``, in a failure domain of its own (module docstring)."""
    name = served.router.server.name
    try:
        server = served.router.status()
        server["ready_required"] = name in required
        server["sessions"] = len(served.sessions)
        server["listens"] = len(served.listens.open)
        server["parked_calls"] = len(served.relay.suspensions)
        server["tasks"] = {"running": served.relay.tasks.live(), "kept": len(served.relay.tasks)}
    except Exception as exc:
        if name not in failing:
            failing.add(name)
            log.error(
                "/status: reading server %s failed: %r; it is shown as unknown (not logged again until it "
                "works), every other server as always",
                name,
                exc,
                exc_info=exc,
            )
        return {"name": name, "state": "unknown", "status_error": repr(exc)}
    failing.discard(name)
    return server


def build_routes(
    routers: Sequence[Router],
    serving: Serving,
    *,
    drain: Drain,
    routing: OwnerRouting | None,
    state_keys: StateKeys | None = None,
    recent_errors: RecentErrors,
    resources: ResourceMetadata,
    metrics: GatewayMetrics | None,
    operator: OperatorAccess,
) -> list[Route]:
    """Starlette's routes over ``serving``'s lanes and the service it has open."""

    failing: set[str] = set()  # servers whose part of the page failed last time (``_server_status``)

    async def status(request: Request) -> Response:
        return wire.json_response(status_document(routers, serving, routing, recent_errors, state_keys, failing))

    async def ui_page(request: Request) -> Response:
        headers = {"content-security-policy": ui.CONTENT_SECURITY_POLICY, "cache-control": "no-store"}
        document = status_document(routers, serving, routing, recent_errors, state_keys, failing)
        return HTMLResponse(ui.render_page(document), headers=headers)

    async def protected_resource(request: Request) -> Response:
        """RFC 9728 metadata, so MCP clients can discover where to log in."""
        document = resources.document(request.path_params.get("path", ""), request.scope)
        if document is None:
            return wire.error_response(404, error_object(-32600, "no MCP endpoint at this path"))
        return wire.json_response(document)

    # Every HTTP method reaches the endpoint, which answers those MCP does not use with a
    # JSON-RPC 405 (Starlette's own would be text/plain).
    routes = [
        Route(path, DrainGuard(serving.lanes[name], drain=drain), methods=None)
        for path, name in mcp_paths(routers).items()
    ]
    probes, scrape = probe_routes(routers, serving, drain=drain, metrics=metrics)
    routes += [*probes, Route("/status", status, methods=["GET"]), Route("/ui", ui_page, methods=["GET"])]
    if resources.enabled:
        routes.append(Route(METADATA_PATH, protected_resource, methods=["GET"]))
        routes.append(Route(METADATA_PATH + "{path:path}", protected_resource, methods=["GET"]))
    routes += scrape
    routes.append(Route(LOGIN_PATH, operator.login, methods=["POST"]))
    return routes


def probe_routes(
    routers: Sequence[Router], serving: Serving, *, drain: Drain, metrics: GatewayMetrics | None
) -> tuple[list[Route], list[Route]]:
    """``/healthz`` and ``/readyz``; ``/metrics`` (none with ``--no-metrics``): what both the
    main listener and the ops listener (``ops_app``) serve."""

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def readyz(request: Request) -> Response:
        """Open to anyone (probes): a status, server names and their states only. Why a server
        is not ready (its last error, which quotes the child's stderr) stays on ``/status``."""
        if drain.draining:
            return PlainTextResponse("not ready: draining\n", status_code=503)
        if not serving.is_open:  # starting, stopped, or the service failed (the process then exits)
            return PlainTextResponse("not ready: not serving\n", status_code=503)
        answer = readiness(routers)
        return PlainTextResponse(answer.text, status_code=200 if answer.ready else 503)

    probes = [Route("/healthz", healthz, methods=["GET"]), Route("/readyz", readyz, methods=["GET"])]
    if metrics is None:
        return probes, []
    registry = metrics.registry

    async def metrics_page(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return probes, [Route("/metrics", metrics_page, methods=["GET"])]


def ops_app(routers: Sequence[Router], serving: Serving, *, drain: Drain, metrics: GatewayMetrics | None) -> Starlette:
    """What ``--ops-listen`` serves on its own socket: ``/healthz``, ``/readyz`` and ``/metrics``
    (the main listener's own pages, over the same state), and nothing else. No edge: no
    authentication (the main listener leaves these three open too), no Origin/Host check (a
    scraper or a kubelet names the pod's address), no access log."""
    probes, scrape = probe_routes(routers, serving, drain=drain, metrics=metrics)
    routes = [*probes, *scrape]
    where = " ".join(str(route.path) for route in routes)

    not_here = _json_rpc_errors(lambda path: f"the ops listener serves {where} only")
    return Starlette(routes=routes, exception_handlers={HTTPException: not_here})
