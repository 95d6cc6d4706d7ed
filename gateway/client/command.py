"""``mcp-stdio-gateway call URL TOOL …``: call one tool of a Streamable HTTP MCP endpoint.

Flow: parse the command line (usage errors before any connection) → open the connection
(era detected, or forced by ``--mode``) → walk ``tools/list`` (every page) and drop the
tools whose ``x-mcp-header`` annotations are invalid, as HTTP clients must → ``--list``
prints them; otherwise build the arguments against the tool's schema, mirror the annotated
ones into ``Mcp-Param-*`` (modern), and call with a ``progressToken`` while a progress bar
runs → print the result.

Exit codes (``gateway.client.errors``): 0 success; 1 a JSON-RPC error, an ``isError``
result or an ``input_required`` this command cannot serve, with the server's message;
2 usage, connection, handshake and ``--timeout`` failures. ``run_call`` is the async
entry (tests await it next to a gateway in the same event loop); ``main`` runs it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Final

import anyio
import httpx
from rich.console import Console
from rich.text import Text

from gateway.client import render, tools
from gateway.client.connection import McpConnection, Mode, open_connection
from gateway.client.errors import EXIT_OK, EXIT_SERVER_ERROR, EXIT_USAGE, ClientError, ServerError, UsageError
from gateway.protocol.jsonrpc import ErrorReply, JsonObject, Reply
from gateway.protocol.versions import Era
from gateway.protocol.xmcpheader import filter_tools, tool_header_params

PROGRESS_TOKEN: Final = "mcp-stdio-gateway-call"
"""One call per process, so one fixed token is unique among our active requests."""
EXIT_INTERRUPTED: Final = 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-stdio-gateway call",
        description="Call a tool of a Streamable HTTP MCP endpoint (modern 2026-07-28 or legacy), "
        "showing its progress and printing its result.",
        epilog="Example: mcp-stdio-gateway call http://127.0.0.1:8000/mcp countdown --arg steps=3. "
        "Exit status: 0 success, 1 error from the server or the tool, 2 usage or connection error.",
    )
    parser.add_argument("url", help="the MCP endpoint, e.g. http://127.0.0.1:8000/mcp")
    parser.add_argument("tool", nargs="?", help="the tool to call (omit with --list)")
    parser.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one argument; VALUE is read as JSON when it parses (42, true, {...}), else as text; "
        "an argument the tool types as string keeps the text (repeatable)",
    )
    parser.add_argument("--json", metavar="ARGS", help="all arguments as one JSON object (--arg values win)")
    parser.add_argument("--list", action="store_true", help="list the tools and their arguments instead of calling")
    parser.add_argument(
        "--mode",
        choices=[mode.value for mode in Mode],
        default=Mode.AUTO.value,
        help="protocol era: detect it (default), or force modern (2026-07-28) or legacy (initialize + session)",
    )
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="an extra HTTP header, e.g. 'Authorization: Bearer …' (repeatable; sent as given)",
    )
    parser.add_argument("--timeout", type=float, default=None, metavar="S", help="give up after S seconds")
    return parser


def parse_header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip() or name != name.strip():
        raise UsageError(f"--header takes 'NAME: VALUE', got {text!r}")
    return name, value.strip()


async def run_call(
    argv: Sequence[str],
    *,
    out: Console | None = None,
    err: Console | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> int:
    """Run ``call`` with ``argv`` (after the subcommand); return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or argparse's own usage error (already printed)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    out = out or Console(soft_wrap=True, emoji=False, highlight=False)
    err = err or Console(stderr=True, soft_wrap=True, emoji=False, highlight=False)
    if not args.list and not args.tool:
        render.print_error(err, "name a TOOL to call, or use --list")
        return EXIT_USAGE
    try:
        with anyio.fail_after(args.timeout):
            return await _run(args, out, err, transport)
    except TimeoutError:
        render.print_error(err, f"no answer within {args.timeout:g} s (--timeout)")
        return EXIT_USAGE
    except ClientError as exc:
        render.print_error(err, exc.message)
        return exc.exit_code


async def _run(args: argparse.Namespace, out: Console, err: Console, transport: httpx.AsyncBaseTransport | None) -> int:
    pairs = [tools.parse_arg(text) for text in args.arg]
    base = tools.parse_json_arguments(args.json) if args.json is not None else {}
    headers = dict(parse_header(text) for text in args.header)
    url = _checked_url(args.url)
    async with open_connection(url, Mode(args.mode), headers, transport=transport) as connection:

        async def fetch(cursor: str | None) -> Reply:
            return await connection.request("tools/list", {"cursor": cursor} if cursor else None)

        listing = await tools.walk_pages(fetch, "tools")
        kept, dropped = filter_tools(listing.items)
        if args.list:
            if listing.error is not None:
                if not listing.items:
                    raise ServerError(f"tools/list failed: {listing.error}")
                render.print_error(err, f"the list may be incomplete: {listing.error}")
            render.print_tools(out, connection.info, kept)
            render.print_hidden(err, dropped)
            return EXIT_OK
        if listing.error is not None:
            err.print(Text(f"could not list the tools ({listing.error}); calling without the schema", style="yellow"))
        return await _call(connection, args.tool, base, pairs, kept, dict(dropped), out, err)


async def _call(
    connection: McpConnection,
    name: str,
    base: JsonObject,
    pairs: list[tuple[str, str]],
    kept: list[JsonObject],
    dropped: dict[str, str],
    out: Console,
    err: Console,
) -> int:
    if name in dropped:
        raise UsageError(
            f"tool {name!r} has an invalid x-mcp-header annotation ({dropped[name]}); "
            "Streamable HTTP clients must not call it"
        )
    tool = next((t for t in kept if t.get("name") == name), None)  # unknown: the server will say so
    arguments = tools.build_arguments(base, pairs, tool)
    param_headers: dict[str, str] = {}
    if tool is not None and connection.era is Era.MODERN:
        param_headers = tools.mirrored_headers(tool_header_params(tool.get("inputSchema")), arguments)
    with render.ProgressView(err, name, PROGRESS_TOKEN) as view:
        reply = await connection.request(
            "tools/call",
            {"name": name, "arguments": arguments},
            meta={"progressToken": PROGRESS_TOKEN},
            param_headers=param_headers,
            on_notification=view.on_notification,
        )
    if isinstance(reply, ErrorReply):
        raise ServerError(render.error_text(reply))
    result = reply.result
    if result.get("resultType") == "input_required":
        raise ServerError(f"{name} asked for input (input_required), which this command cannot provide")
    if result.get("isError") is True:
        err.print(Text(f"{name} returned an error:", style="bold red"))
        render.print_result(result, err)
        return EXIT_SERVER_ERROR
    render.print_result(result, out)
    return EXIT_OK


def _checked_url(text: str) -> str:
    try:
        url = httpx.URL(text)
    except httpx.InvalidURL as exc:
        raise UsageError(f"not a URL: {text!r} ({exc})") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise UsageError(f"not an http(s) URL: {text!r}")
    return text


def main(argv: Sequence[str]) -> int:
    try:
        return anyio.run(run_call, list(argv))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
