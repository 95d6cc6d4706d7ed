"""Settings that say what to serve and how the process runs: ``--config``, ``--command``,
the log format, the servers readiness waits for, the drain on SIGTERM, ``/metrics``, the ops
listener (``--ops-listen``) and tracing (``--tracing``).

Declared as ``gateway.settings.declaration.Setting``; ``gateway.settings`` gathers them."""

from __future__ import annotations

from typing import Final

from gateway.settings.declaration import DRAIN_TIMEOUT, NOT_NEGATIVE, Setting, either, rule

MAX_PORT: Final = 65535
TRACING_CHOICES: Final = ("auto", "otlp", "off")
"""``--tracing``: ``gateway.ops.tracing.TRACING_CHOICES`` (that module is not imported by ``--help``)."""


def listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9090`` for IPv6) → (host, port); ``ValueError`` saying what is wrong."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"{text!r}: write an IPv6 address in brackets, as [::]:9090")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= MAX_PORT:
        raise ValueError(f"{text!r} is not HOST:PORT, such as 0.0.0.0:9090")
    return host, int(port)


def _listen_problem(text: str | None) -> str | None:
    if text is None:
        return None
    try:
        listen_address(text)
    except ValueError as exc:
        return str(exc)
    return None


SETTINGS: Final[tuple[Setting, ...]] = (
    Setting(
        "--config",
        brief=True,
        metavar="FILE",
        help="serve every server of a JSON file in the mcpServers shape, at /servers/NAME/mcp",
    ),
    Setting(
        "--command",
        brief=True,
        metavar="COMMAND_LINE",
        dest="env_command",
        help="the stdio server as one string (for MCP_GATEWAY_COMMAND); split like a shell would, never run by one",
    ),
    Setting(
        "--log-format",
        field="log_format",
        brief=True,
        check=rule(lambda v: v in ("text", "json"), "must be text or json"),
        default="text",
        choices=("text", "json"),
        help="one line per event as human text or JSON (default: %(default)s)",
    ),
    Setting(
        "--ready-requires",
        field="ready_requires",
        repeat=True,
        metavar="NAME",
        help="/readyz fails while this server is not ready (repeatable, or comma-separated; in a --config file, "
        "readyRequired: true on the server). Other servers that are not ready are named in /readyz's answer, "
        "on /status and in mcp_gateway_server_state, but keep the replica ready as long as one server is; "
        "the only server of a replica is always required",
    ),
    Setting(
        "--drain-timeout",
        field="drain_timeout",
        check=NOT_NEGATIVE,
        kind=float,
        default=DRAIN_TIMEOUT,
        metavar="SECONDS",
        help="on SIGTERM, let in-flight requests, parked MRTR calls and tasks finish this long (default: %(default)s)",
    ),
    Setting(
        "--no-metrics",
        field="metrics",
        negate=True,
        kind=bool,
        help="do not serve /metrics",
    ),
    Setting(
        "--ops-listen",
        field="ops_listen",
        check=_listen_problem,
        metavar="HOST:PORT",
        help="also serve /healthz, /readyz and /metrics (nothing else: plain HTTP, no authentication, "
        "no Origin/Host check) on this second address, e.g. 0.0.0.0:9090, so that a gateway bound to "
        "loopback (a sidecar) can be probed and scraped from outside its pod; it stops with the gateway",
    ),
    Setting(
        "--tracing",
        field="tracing",
        check=rule(lambda v: v in TRACING_CHOICES, f"must be {either(TRACING_CHOICES)}"),
        default="auto",
        choices=TRACING_CHOICES,
        help="OpenTelemetry spans per MCP request, exported over OTLP/HTTP as the standard OTEL_* variables "
        "configure (needs the otel extra: pip install 'mcp-stdio-gateway[otel]'): otlp, off, or auto, which "
        "traces when OTEL_TRACES_EXPORTER=otlp or an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT, "
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set (default: %(default)s)",
    ),
)
