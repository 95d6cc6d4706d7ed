"""``mcp-stdio-gateway call URL TOOL …``: call one tool of a Streamable HTTP MCP endpoint.

Flow: parse the command line (usage errors before any connection) → open the connection
(era detected, or forced by ``--mode``) → walk ``tools/list`` (every page) and drop the
tools whose ``x-mcp-header`` annotations are invalid, as HTTP clients must → ``--list``
prints them; otherwise build the arguments against the tool's schema, mirror the annotated
ones into ``Mcp-Param-*`` (modern), and call with a ``progressToken`` while a progress bar
runs → answer the server's questions (``input_required`` rounds: an elicitation form is
asked in the terminal, ``roots/list`` gets ``--root``, sampling is refused) and retry →
print the result (``--raw``: the result as JSON). On a terminal a spinner runs while the
first answer is awaited (a gateway answers only once its server has started).

Exit codes (``gateway.tools.call.errors``): 0 success; 1 a JSON-RPC error, an ``isError``
result or an ``input_required`` this command cannot serve, with the server's message;
2 usage, connection and handshake failures; 124 ``--timeout`` expired. Options may come
before, between or after URL and TOOL. ``run_call`` is the async
entry (tests await it next to a gateway in the same event loop); ``main`` runs it.
"""

from __future__ import annotations

import argparse
import ssl
import sys
from collections.abc import Sequence
from typing import Final

import anyio
import httpx
from rich.console import Console
from rich.text import Text

from gateway.errors import ConfigError
from gateway.helptext import HelpFormatter
from gateway.protocol.bridge import CHILD_META
from gateway.protocol.jsonrpc import ErrorReply, JsonObject, Reply, Request, Result, error_object
from gateway.protocol.roots import parse_root
from gateway.protocol.tasks import is_task_result
from gateway.protocol.versions import Era
from gateway.protocol.xmcpheader import filter_tools, tool_header_params
from gateway.tools.call import render, startwatch, tools
from gateway.tools.call.asks import Asker, AskRefused, ReadLine
from gateway.tools.call.connection import CONNECT_TIMEOUT, McpConnection, Mode, ServerRequestHandler, open_connection
from gateway.tools.call.errors import (
    EXIT_OK,
    EXIT_SERVER_ERROR,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    ClientError,
    ServerError,
    UsageError,
)
from gateway.tools.call.taskpoll import TaskFollower

PROGRESS_TOKEN: Final = "mcp-stdio-gateway-call"
"""One call per process, so one fixed token is unique among our active requests."""
EXIT_INTERRUPTED: Final = 130
MAX_INPUT_ROUNDS: Final = 10
"""``input_required`` rounds answered in one call: a server that keeps asking cannot loop us forever."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-stdio-gateway call",
        formatter_class=HelpFormatter,
        description="Call a tool of a Streamable HTTP MCP endpoint (modern 2026-07-28 or legacy), "
        "showing its progress and printing its result.",
        epilog="Example: mcp-stdio-gateway call http://127.0.0.1:8000/mcp countdown --arg steps=3. "
        "Exit status: 0 success, 1 error from the server or the tool, 2 usage or connection error, "
        "124 --timeout expired. Options may come anywhere, before or after URL and TOOL.",
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
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help="give up after S seconds (default: no limit; see --connect-timeout for connecting)",
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=CONNECT_TIMEOUT,
        metavar="S",
        help=f"while nothing accepts a connection at URL (a gateway still starting), keep trying "
        f"for S seconds, then ask whether the gateway is running (default: {CONNECT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--raw",
        action="store_true",
        help="print the result (or, with --list, the tools) as raw JSON instead of text; "
        "--json stays the arguments' flag",
    )
    parser.add_argument(
        "--cacert",
        metavar="FILE",
        help="also trust the certificates in FILE (PEM) for https, e.g. a self-signed gateway's "
        "--tls-cert-file; a server certificate itself may be given (without this flag: the "
        "system's CAs, or SSL_CERT_FILE when set)",
    )
    parser.add_argument(
        "--root",
        action="append",
        default=[],
        metavar="PATH_OR_URI",
        help="a root to answer the server's roots/list with (repeatable; declares the roots capability)",
    )
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
        args = parser.parse_intermixed_args(argv)  # options anywhere: URL --mode legacy TOOL
    except SystemExit as exc:  # --help, or argparse's own usage error (already printed)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    out = out or Console(soft_wrap=True, emoji=False, highlight=False)
    err = err or Console(stderr=True, soft_wrap=True, emoji=False, highlight=False)
    if not args.list and not args.tool:
        render.print_error(err, "name a TOOL to call, or use --list")
        return EXIT_USAGE
    if not args.connect_timeout > 0:
        render.print_error(err, f"--connect-timeout must be more than 0 seconds, got {args.connect_timeout:g}")
        return EXIT_USAGE
    try:
        roots = [parse_root(root, "--root") for root in args.root]
    except ConfigError as exc:
        render.print_error(err, exc.message)
        return EXIT_USAGE
    asker = Asker(err, read_line=_terminal_reader(), roots=roots)
    try:
        with anyio.fail_after(args.timeout):
            return await _run(args, out, err, transport, asker)
    except TimeoutError:
        render.print_error(err, f"no answer within {args.timeout:g} s (--timeout)")
        return EXIT_TIMEOUT
    except ClientError as exc:
        render.print_error(err, exc.message)
        return exc.exit_code


def _terminal_reader() -> ReadLine | None:
    """Reads the user's answers when a person is at a terminal (stdin and stderr both ttys)."""
    if sys.stdin is not None and sys.stdin.isatty() and sys.stderr.isatty():
        return sys.stdin.readline
    return None


async def _run(
    args: argparse.Namespace,
    out: Console,
    err: Console,
    transport: httpx.AsyncBaseTransport | None,
    asker: Asker,
) -> int:
    pairs = [tools.parse_arg(text) for text in args.arg]
    base = tools.parse_json_arguments(args.json) if args.json is not None else {}
    headers = dict(parse_header(text) for text in args.header)
    url = _checked_url(args.url)
    verify = trusting(args.cacert) if args.cacert else True
    screen = render.Screen()
    with render.Waiting(err, url, screen) as waiting:
        watcher = None
        if waiting.running and transport is None:  # a given transport is a test's whole world

            async def watcher() -> None:
                await startwatch.watch(url, headers, verify, waiting.on_detail)

        async def session() -> int:  # the connection, the list, then the list shown or the call
            async with open_connection(
                url,
                Mode(args.mode),
                headers,
                transport=transport,
                verify=verify,
                capabilities=asker.capabilities(),
                on_request=_answerer(asker, screen),
                connect_timeout=args.connect_timeout,
            ) as connection:

                async def fetch(cursor: str | None) -> Reply:
                    return await connection.request("tools/list", {"cursor": cursor} if cursor else None)

                if args.list:
                    await connection.describe()  # forced modern: who answers is known only from server/discover
                listing = await tools.walk_pages(fetch, "tools")
                waiting.stop()
                if connection.redirected_from is not None:
                    err.print(Text(f"note: {connection.redirected_from} redirects to {connection.url}; use that URL"))
                kept, dropped = filter_tools(listing.items)
                if args.list:
                    if listing.error is not None:
                        if not listing.items:
                            raise ServerError(f"tools/list failed: {listing.error}")
                        render.print_error(err, f"the list may be incomplete: {listing.error}")
                    if args.raw:
                        render.print_raw(out, {"tools": kept})
                    else:
                        render.print_tools(out, connection.info, kept, _child_era(connection))
                    render.print_hidden(err, dropped)
                    return EXIT_OK
                if listing.error is not None:
                    err.print(
                        Text(f"could not list the tools ({listing.error}); calling without the schema", style="yellow")
                    )
                call = Call(connection, asker, out, err, screen, raw=args.raw)
                return await call.run(args.tool, base, pairs, kept, dict(dropped))

        return await startwatch.beside(session, watcher)


def _child_era(connection: McpConnection) -> str | None:
    """The child's era and version when a gateway bridges one (its discover ``_meta`` says)."""
    meta = connection.info.raw.get("_meta") if connection.info else None
    child = meta.get(CHILD_META) if isinstance(meta, dict) else None
    if not isinstance(child, dict) or not isinstance(child.get("era"), str):
        return None
    version = child.get("protocolVersion")
    return f"{child['era']} ({version})" if isinstance(version, str) else str(child["era"])


def _answerer(asker: Asker, screen: render.Screen) -> ServerRequestHandler:
    """Answers a legacy server's requests on the call's stream (``Asker.answer``), the live
    display paused while the user types."""

    async def answer(request: Request) -> Reply:
        with screen.paused():
            try:
                return Result(request.id, await asker.answer(request.method, request.params))
            except AskRefused as exc:
                asker.err.print(Text(f"refused: {exc.message}", style="yellow"))
                return ErrorReply(request.id, error_object(exc.code, exc.message))

    return answer


class Call:
    """One ``tools/call`` with its ``input_required`` rounds, progress and printed result."""

    def __init__(
        self, connection: McpConnection, asker: Asker, out: Console, err: Console, screen: render.Screen, *, raw: bool
    ) -> None:
        self.connection = connection
        self.screen = screen
        self.asker = asker
        self.out = out
        self.err = err
        self.raw = raw
        self.unlisted = ""  # for a tool not in the list: the closest names, added to its failure

    async def run(
        self,
        name: str,
        base: JsonObject,
        pairs: list[tuple[str, str]],
        kept: list[JsonObject],
        dropped: dict[str, str],
    ) -> int:
        if name in dropped:
            raise UsageError(
                f"tool {name!r} has an invalid x-mcp-header annotation ({dropped[name]}); "
                "Streamable HTTP clients must not call it"
            )
        tool = next((t for t in kept if t.get("name") == name), None)  # unknown: the server will say so
        if tool is None and kept:
            self.unlisted = tools.unlisted_tool_hint(name, kept)
        arguments = tools.build_arguments(base, pairs, tool)
        param_headers: dict[str, str] = {}
        if tool is not None and self.connection.era is Era.MODERN:
            param_headers = tools.mirrored_headers(tool_header_params(tool.get("inputSchema")), arguments)
        params: JsonObject = {"name": name, "arguments": arguments}
        for _ in range(MAX_INPUT_ROUNDS):
            result = await self._send(name, params, param_headers)
            if is_task_result(result):  # the gateway (or server) answered with a task: poll it
                follower = TaskFollower(self.connection, self.asker, self.err, self.screen, name)
                return self._print(name, await follower.follow(result))
            if result.get("resultType") != "input_required":
                return self._print(name, result)
            params = {"name": name, "arguments": arguments}
            try:
                params["inputResponses"] = await self.asker.answer_all(result.get("inputRequests"))
            except AskRefused as exc:
                raise ServerError(f"{name} needs input that call cannot give: {exc.message}") from exc
            if "requestState" in result:
                params["requestState"] = result["requestState"]  # echoed exactly (MRTR)
        raise ServerError(f"{name} still asked for input after {MAX_INPUT_ROUNDS} rounds; giving up")

    async def _send(self, name: str, params: JsonObject, param_headers: dict[str, str]) -> JsonObject:
        with render.ProgressView(self.err, name, PROGRESS_TOKEN, self.screen) as view:
            reply = await self.connection.request(
                "tools/call",
                params,
                meta={"progressToken": PROGRESS_TOKEN},
                param_headers=param_headers,
                on_notification=view.on_notification,
            )
        if isinstance(reply, ErrorReply):
            raise ServerError(render.error_text(reply) + (f"\n{self.unlisted}" if self.unlisted else ""))
        return reply.result

    def _print(self, name: str, result: JsonObject) -> int:
        failed = result.get("isError") is True
        if self.raw:
            render.print_raw(self.out, result)
        elif failed:
            self.err.print(Text(f"{name} returned an error:", style="bold red"))
            render.print_result(result, self.err)
            if self.unlisted:
                self.err.print(Text(self.unlisted, style="yellow"))
        else:
            render.print_result(result, self.out)
        return EXIT_SERVER_ERROR if failed else EXIT_OK


def trusting(cafile: str) -> ssl.SSLContext:
    """The default trust (httpx's: SSL_CERT_FILE when set, else certifi's CAs) plus ``cafile``.
    A certificate in ``cafile`` is an anchor even when it is not a CA's (partial chains), so
    a gateway's own ``--tls-cert-file`` works, whoever issued it."""
    context = httpx.create_ssl_context()
    try:
        context.load_verify_locations(cafile=cafile)
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"--cacert: cannot load {cafile}: {getattr(exc, 'strerror', None) or exc}") from exc
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    return context


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
