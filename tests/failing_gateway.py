"""``python -m tests.failing_gateway ARGS``: the gateway as ``mcp-stdio-gateway ARGS`` runs it, with
one route more, ``POST /test/fail-service``, that fails the service after start-up: a task that
raises is started in the service's own task group, as a bug outside every inner failure domain
would. For ``tests/integration/test_failure_domains.py``: the process must then exit non-zero."""

from __future__ import annotations

import sys

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from gateway import cli, server


async def fail_service(request: Request) -> Response:
    async def raise_in_the_service() -> None:
        raise RuntimeError("injected into the service's task group")

    service_tasks = request.app.state.service.served[0].relay.tasks.task_group  # the service's task group
    service_tasks.start_soon(raise_in_the_service)
    return PlainTextResponse("failing\n")


def main() -> int:
    settings = cli.parse_settings(sys.argv[1:])
    app = server.build_app(settings)
    app.router.routes.append(Route("/test/fail-service", fail_service, methods=["POST"]))
    return server.run(settings, app)


if __name__ == "__main__":
    sys.exit(main())
