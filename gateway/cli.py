"""Command line: parse arguments into ``Settings`` and hand them to ``server.run``. No logic.

``mcp-stdio-gateway call …`` and ``mcp-stdio-gateway inspect …`` are subcommands, dispatched
on the first argument before the serve parser runs, so ``mcp-stdio-gateway [serve options]
[-- COMMAND …]`` keeps working unchanged.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gateway import __version__
from gateway.config import DEFAULT_HOST, DEFAULT_PORT, Settings, demo_command
from gateway.errors import ConfigError
from gateway.router import Isolation
from gateway.stdio.pool import PoolSettings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-stdio-gateway",
        description="Serve a stdio MCP server over Streamable HTTP (modern 2026-07-28 and legacy clients).",
        epilog="Without a COMMAND, the built-in demo server is served. Example: "
        "mcp-stdio-gateway --port 8000 -- npx -y @modelcontextprotocol/server-everything. "
        "Also: 'mcp-stdio-gateway call URL TOOL' calls a tool of any MCP endpoint, and "
        "'mcp-stdio-gateway inspect -- COMMAND' reports what a stdio server offers (each has --help).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to bind (default: %(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to bind (default: %(default)s)")
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="cancel a request at the child after this long (default: none)",
    )
    parser.add_argument(
        "--probe-timeout",
        type=float,
        default=Settings.probe_timeout,
        metavar="SECONDS",
        help="wait this long for the child's answer to server/discover (default: %(default)s)",
    )
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=Settings.startup_timeout,
        metavar="SECONDS",
        help="wait this long for a legacy child's initialize (default: %(default)s)",
    )
    parser.add_argument(
        "--max-line-bytes",
        type=int,
        default=Settings.max_line_bytes,
        metavar="BYTES",
        help="longest stdout line accepted from a child (default: %(default)s)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=Settings.max_body_bytes,
        metavar="BYTES",
        help="largest POST body accepted (default: %(default)s)",
    )
    parser.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="browser Origin allowed to call the gateway (repeatable)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST",
        help="extra Host header value accepted when bound to loopback (repeatable)",
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    pool = parser.add_argument_group("pool and isolation")
    defaults = PoolSettings()
    pool.add_argument(
        "--pool-min",
        type=int,
        default=defaults.min_size,
        metavar="N",
        help="children started (and kept) before traffic (default: %(default)s)",
    )
    pool.add_argument(
        "--pool-max",
        type=int,
        default=None,
        metavar="N",
        help="children at most, started on demand (default: --pool-min, at least 1)",
    )
    pool.add_argument(
        "--max-in-flight",
        type=int,
        default=defaults.max_in_flight,
        metavar="N",
        help="requests at once per child; 1 serialises, 0 = no limit (default: %(default)s)",
    )
    pool.add_argument(
        "--queue-timeout",
        type=float,
        default=defaults.queue_timeout,
        metavar="SECONDS",
        help="wait this long for a free child, then 503 + Retry-After (default: %(default)s)",
    )
    pool.add_argument(
        "--idle-timeout",
        type=float,
        default=defaults.idle_timeout,
        metavar="SECONDS",
        help="stop children above --pool-min after this long unused (default: %(default)s)",
    )
    pool.add_argument(
        "--max-requests",
        type=int,
        default=defaults.max_requests,
        metavar="N",
        help="recycle a child after N requests; 0 = never (default: %(default)s)",
    )
    pool.add_argument(
        "--max-age",
        type=float,
        default=defaults.max_age,
        metavar="SECONDS",
        help="recycle a child after this long; 0 = never (default: %(default)s)",
    )
    pool.add_argument(
        "--stall-timeout",
        type=float,
        default=defaults.stall_timeout,
        metavar="SECONDS",
        help="recycle a child with requests pending but silent this long; 0 = off (default: %(default)s)",
    )
    pool.add_argument(
        "--liveness-interval",
        type=float,
        default=defaults.liveness_interval,
        metavar="SECONDS",
        help="ping an idle child this often, recycle it if it fails; 0 = off (default: %(default)s)",
    )
    pool.add_argument(
        "--isolation",
        choices=[i.value for i in Isolation],
        default=Isolation.SHARED.value,
        help="who may share a child: everyone, one principal, one legacy session (default: %(default)s)",
    )
    pool.add_argument(
        "--principal-header",
        default=None,
        metavar="HEADER",
        help="trust this header (set by an authenticating reverse proxy) as the principal",
    )
    pool.add_argument(
        "--env-from-header",
        action="append",
        default=[],
        metavar="HEADER=ENV",
        help="pass a request header to the child as an environment variable (repeatable); "
        "children are then keyed by the values, never shared across them",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS... (the stdio server to run)")
    return parser


def parse_settings(argv: Sequence[str]) -> Settings:
    args = build_parser().parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    return Settings(
        command=tuple(command) if command else demo_command(),
        host=args.host,
        port=args.port,
        request_timeout=args.request_timeout,
        max_line_bytes=args.max_line_bytes,
        max_body_bytes=args.max_body_bytes,
        probe_timeout=args.probe_timeout,
        startup_timeout=args.startup_timeout,
        allowed_origins=tuple(args.allowed_origin),
        allowed_hosts=tuple(args.allowed_host),
        log_level=args.log_level,
        pool=pool_settings(args),
        isolation=Isolation(args.isolation),
        principal_header=args.principal_header,
        env_from_headers=env_mappings(args.env_from_header),
    )


def pool_settings(args: argparse.Namespace) -> PoolSettings:
    maximum = args.pool_max if args.pool_max is not None else max(1, args.pool_min)
    try:
        return PoolSettings(
            min_size=args.pool_min,
            max_size=maximum,
            max_in_flight=args.max_in_flight,
            queue_timeout=args.queue_timeout,
            idle_timeout=args.idle_timeout,
            max_requests=args.max_requests,
            max_age=args.max_age,
            stall_timeout=args.stall_timeout,
            liveness_interval=args.liveness_interval,
        )
    except ValueError as exc:
        raise ConfigError("pool", str(exc)) from exc


def env_mappings(items: Sequence[str]) -> dict[str, str]:
    mappings: dict[str, str] = {}
    for item in items:
        header, sep, env = item.partition("=")
        if not sep or not header.strip() or not env.strip():
            raise ConfigError("--env-from-header", f"{item!r} is not HEADER=ENV_VAR")
        mappings[header.strip().lower()] = env.strip()
    return mappings


SUBCOMMANDS = frozenset({"call", "inspect"})


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        return run_subcommand(argv[0], argv[1:])
    try:
        settings = parse_settings(argv)
    except ConfigError as exc:
        print(f"mcp-stdio-gateway: {exc.message}", file=sys.stderr)
        return 2
    from gateway import server  # imported late: --help and --version stay fast

    return server.run(settings)


def run_subcommand(name: str, argv: Sequence[str]) -> int:
    # Imported late, like the server: each subcommand pulls in only what it needs.
    if name == "call":
        from gateway.client import command

        return command.main(argv)
    from gateway import inspect_cli

    return inspect_cli.main(argv)
