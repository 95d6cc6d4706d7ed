"""Command line: parse arguments into ``Settings`` and hand them to ``server.run``. No logic."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gateway import __version__
from gateway.config import DEFAULT_HOST, DEFAULT_PORT, Settings, demo_command
from gateway.errors import ConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-stdio-gateway",
        description="Serve a stdio MCP server over Streamable HTTP (modern 2026-07-28 and legacy clients).",
        epilog="Without a COMMAND, the built-in demo server is served. Example: "
        "mcp-stdio-gateway --port 8000 -- npx -y @modelcontextprotocol/server-everything",
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
    )


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else argv)
    except ConfigError as exc:
        print(f"mcp-stdio-gateway: {exc.message}", file=sys.stderr)
        return 2
    from gateway import server  # imported late: --help and --version stay fast

    return server.run(settings)
