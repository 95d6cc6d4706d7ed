"""``mcp-stdio-gateway inspect [--probe-timeout S] [--startup-timeout S] [--json] -- COMMAND ARGS…``: a server's offer.

The server is started exactly as the gateway starts a child (``open_child``: argv without
a shell, own process group, the ``server/discover`` probe, then ``initialize`` for a legacy
server), asked for its lists, and stopped with the gateway's ladder. The report names:

* the era and protocol version, supported versions, server info, capabilities,
  instructions, and the start-up time (spawn to ready, in ms);
* the tools with a one-line argument summary, flagging each whose ``x-mcp-header``
  annotations are invalid with the reason (the gateway hides those from HTTP clients);
* prompts, resources and resource templates when the capabilities advertise them (every
  page; modern children get the full ``_meta`` on each request);
* the lines it wrote to stdout that are not JSON-RPC, with a hint, and its stderr tail —
  both read after the child stopped, so they are complete.

While the server starts, a spinner (on a terminal) shows the seconds so far and the answer
it still owes (``waiting for pid N to answer initialize (3 s of 60)``); ``--startup-timeout``
bounds ``initialize`` as the gateway's flag does. A list that fails (an error reply, the
child dying) is reported in its section; the report
is still printed. ``--json`` prints the report as one JSON object. Exit status: 0 for a
report, 1 when the server cannot start (``cannot start …``), 2 for usage errors.
``inspect_server`` gathers the report, ``run_inspect`` is the async entry, ``main`` runs it.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import anyio
import orjson
from rich.console import Console
from rich.text import Text

from gateway import __version__
from gateway.errors import ChildError, GatewayError
from gateway.helptext import HelpFormatter
from gateway.protocol.handshake import modern_meta
from gateway.protocol.jsonrpc import JsonObject, Reply
from gateway.protocol.versions import Era
from gateway.protocol.xmcpheader import InvalidToolAnnotation, tool_header_params
from gateway.stdio.child import StdioChild
from gateway.stdio.handshake import StartWait, StartWatcher
from gateway.stdio.launch import open_child
from gateway.stdio.spec import HANDSHAKE_TIMEOUT, PROBE_TIMEOUT, ChildSpec
from gateway.tools.call.tools import ArgumentInfo, Listing, argument_summary, first_line, walk_pages

LIST_TIMEOUT: Final = 30.0
"""Seconds each list request may take before the report says it timed out."""
STDOUT_HINT: Final = (
    "this server prints to stdout; MCP stdio servers must write only JSON-RPC there — "
    "most clients tolerate it, the gateway drops those lines"
)
EXIT_OK: Final = 0
EXIT_CANNOT_START: Final = 1
EXIT_USAGE: Final = 2


@dataclass(frozen=True, slots=True)
class ToolEntry:
    name: str
    description: str
    arguments: list[ArgumentInfo]
    invalid_header: str | None = None  # why its x-mcp-header annotations are invalid


@dataclass(frozen=True, slots=True)
class Section:
    """One list: not advertised (``advertised=False``), or its items and why it stopped early."""

    advertised: bool
    items: list[JsonObject] = field(default_factory=list)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Report:
    command: list[str]
    era: str
    protocol_version: str
    supported_versions: list[str]
    server_info: JsonObject
    capabilities: JsonObject
    instructions: str | None
    startup_ms: int
    tools: list[ToolEntry]
    tools_error: str | None
    prompts: Section
    resources: Section
    resource_templates: Section
    stdout_noise: list[str]
    non_json_lines: int
    stderr_tail: list[str]

    def to_json(self) -> JsonObject:
        out = asdict(self)
        if self.non_json_lines:
            out["stdout_hint"] = STDOUT_HINT
        return out


async def inspect_server(
    command: Sequence[str],
    *,
    probe_timeout: float = PROBE_TIMEOUT,
    startup_timeout: float = HANDSHAKE_TIMEOUT,
    on_start: StartWatcher | None = None,
) -> Report:
    """Start ``command`` as the gateway would, gather the report, stop it. Raises
    ``ChildStartError``. ``on_start`` is told what the handshake waits for (the spinner)."""
    spec = ChildSpec(command[0], tuple(command[1:]), probe_timeout=probe_timeout, handshake_timeout=startup_timeout)
    started = anyio.current_time()
    async with open_child(spec, gateway_version=__version__, on_start=on_start) as child:
        startup_ms = round((anyio.current_time() - started) * 1000)
        assert child.info is not None
        info = child.info
        tools = await _list(child, "tools/list", "tools")
        prompts = await _section(child, "prompts", "prompts/list", "prompts")
        resources = await _section(child, "resources", "resources/list", "resources")
        templates = await _section(child, "resources", "resources/templates/list", "resourceTemplates")
    # Read after the stop: the pumps have drained stdout and stderr by now.
    return Report(
        command=list(command),
        era=info.era.value,
        protocol_version=info.version,
        supported_versions=list(info.supported_versions),
        server_info=info.server_info,
        capabilities=info.capabilities,
        instructions=info.instructions,
        startup_ms=startup_ms,
        tools=[_tool_entry(tool) for tool in tools.items],
        tools_error=tools.error,
        prompts=prompts,
        resources=resources,
        resource_templates=templates,
        stdout_noise=list(child.stdout_noise),
        non_json_lines=child.non_json_lines,
        stderr_tail=child.stderr_tail,
    )


async def _list(child: StdioChild, method: str, key: str) -> Listing:
    info = child.info
    assert info is not None

    async def fetch(cursor: str | None) -> Reply:
        params: JsonObject = {"cursor": cursor} if cursor else {}
        if info.era is Era.MODERN:
            params["_meta"] = modern_meta(__version__)
        return await child.request(method, params or None, timeout=LIST_TIMEOUT)

    try:
        return await walk_pages(fetch, key)
    except ChildError as exc:
        return Listing([], exc.detailed)


async def _section(child: StdioChild, capability: str, method: str, key: str) -> Section:
    assert child.info is not None
    if capability not in child.info.capabilities:
        return Section(advertised=False)
    listing = await _list(child, method, key)
    return Section(True, listing.items, listing.error)


def _tool_entry(tool: JsonObject) -> ToolEntry:
    schema = tool.get("inputSchema")
    description = tool.get("description")
    invalid = None
    try:
        params = tool_header_params(schema)
    except InvalidToolAnnotation as exc:
        params, invalid = (), exc.reason
    return ToolEntry(
        name=str(tool.get("name")),
        description=first_line(description) if isinstance(description, str) else "",
        arguments=argument_summary(schema, params),
        invalid_header=invalid,
    )


# --- rendering --------------------------------------------------------------------------------------


def render(report: Report, console: Console) -> None:
    name = " ".join(str(report.server_info.get(k)) for k in ("name", "version") if report.server_info.get(k))
    console.print(Text(name or "(no server info)", style="bold"))
    how = f"supports {', '.join(report.supported_versions)}" if report.era == Era.MODERN else "after initialize"
    _field(console, "era", f"{report.era}, protocol {report.protocol_version} ({how})")
    _field(console, "start-up", f"{report.startup_ms} ms")
    _field(console, "command", shlex.join(report.command))
    _field(console, "capabilities", capability_summary(report.capabilities) or "none")
    if report.instructions:
        _field(console, "instructions", report.instructions)
    _render_tools(report, console)
    console.print()
    _render_section(console, "prompts", report.prompts, _prompt_line)
    _render_section(console, "resources", report.resources, _resource_line)
    if report.resource_templates.advertised:
        _render_section(console, "resource templates", report.resource_templates, _template_line)
    if report.non_json_lines:
        console.print()
        console.print(Text(f"stdout: {report.non_json_lines} line(s) that are not JSON-RPC", style="bold yellow"))
        for line in report.stdout_noise:
            console.print(Text(f"  {line}"))
        console.print(Text(f"  hint: {STDOUT_HINT}", style="yellow"))
    if report.stderr_tail:
        console.print()
        console.print(Text(f"stderr (last {len(report.stderr_tail)} lines)", style="bold"))
        for line in report.stderr_tail:
            console.print(Text(f"  {line}", style="dim"))


FIELD_INDENT: Final = 15
"""Columns before a report field's value: 2 of margin and 13 of label."""


def _field(console: Console, label: str, value: str) -> None:
    """One labelled field; a value of several lines (instructions) stays under its first line."""
    lines = value.strip("\n").splitlines() or [""]
    console.print(Text.assemble((f"  {label:<13}", "cyan"), lines[0]))
    for line in lines[1:]:
        console.print(Text(" " * FIELD_INDENT + line if line.strip() else ""))


def capability_summary(capabilities: JsonObject) -> str:
    parts = []
    for key, value in capabilities.items():
        if isinstance(value, dict) and value:
            flags = [k if v is True else f"{k}={orjson.dumps(v).decode()}" for k, v in value.items() if v is not False]
            parts.append(f"{key} ({', '.join(flags)})" if flags else key)
        else:
            parts.append(key)
    return ", ".join(parts)


def _render_tools(report: Report, console: Console) -> None:
    console.print()
    console.print(Text(f"tools ({len(report.tools)})", style="bold"))
    if report.tools_error:
        console.print(Text(f"  tools/list failed: {report.tools_error}", style="red"))
    width = max((len(tool.name) for tool in report.tools), default=0) + 2
    for tool in report.tools:
        line = Text(f"  {tool.name:<{width}}", style="green")
        if tool.invalid_header is not None:
            line.append(f"INVALID x-mcp-header: {tool.invalid_header} (hidden from HTTP clients)", style="red")
        else:
            line.append("; ".join(arg.short() for arg in tool.arguments) or "(no arguments)")
        console.print(line)


def _render_section(console: Console, title: str, section: Section, line: Any) -> None:
    if not section.advertised:
        console.print(Text(f"{title}: not advertised", style="dim"))
        return
    console.print()
    console.print(Text(f"{title} ({len(section.items)})", style="bold"))
    if section.error:
        console.print(Text(f"  listing failed: {section.error}", style="red"))
    for item in section.items:
        console.print(Text(f"  {line(item)}"))


def _prompt_line(prompt: JsonObject) -> str:
    arguments = prompt.get("arguments")
    names = [
        f"{a.get('name')}{', required' if a.get('required') else ''}"
        for a in (arguments if isinstance(arguments, list) else [])
        if isinstance(a, dict)
    ]
    return f"{prompt.get('name')}  " + ("; ".join(names) or "(no arguments)")


def _resource_line(resource: JsonObject) -> str:
    extra = ", ".join(str(resource[k]) for k in ("name", "mimeType") if isinstance(resource.get(k), str))
    return f"{resource.get('uri')}" + (f"  ({extra})" if extra else "")


def _template_line(template: JsonObject) -> str:
    name = template.get("name")
    return f"{template.get('uriTemplate')}" + (f"  ({name})" if isinstance(name, str) else "")


# --- command line -----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-stdio-gateway inspect",
        formatter_class=HelpFormatter,
        description="Start a stdio MCP server the way the gateway would and report what it offers.",
        epilog="Example: mcp-stdio-gateway inspect -- npx -y @modelcontextprotocol/server-everything",
    )
    parser.add_argument(
        "--probe-timeout",
        type=float,
        default=PROBE_TIMEOUT,
        metavar="S",
        help="wait this long for the answer to server/discover before trying initialize (default: %(default)s)",
    )
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=HANDSHAKE_TIMEOUT,
        metavar="S",
        help="wait this long for a legacy server's answer to initialize, as the gateway's "
        "--startup-timeout (default: %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS... (the stdio server)")
    return parser


async def run_inspect(argv: Sequence[str], *, out: Console | None = None, err: Console | None = None) -> int:
    """Run ``inspect`` with ``argv`` (after the subcommand); return the exit status."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    out = out or Console(soft_wrap=True, emoji=False, highlight=False)
    err = err or Console(stderr=True, soft_wrap=True, emoji=False, highlight=False)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        err.print(Text.assemble(("error: ", "bold red"), "name the server to inspect: inspect -- COMMAND ARGS…"))
        return EXIT_USAGE
    starting = Starting(shlex.join(command))
    try:
        # On a terminal, a spinner while the server starts (an npx cold start takes seconds):
        # the time so far and the answer the server still owes, as the gateway logs them.
        with err.status(starting) if err.is_terminal else nullcontext():
            report = await inspect_server(
                command,
                probe_timeout=args.probe_timeout,
                startup_timeout=args.startup_timeout,
                on_start=starting.watch,
            )
    except GatewayError as exc:
        err.print(Text.assemble(("error: ", "bold red"), exc.detailed))
        return EXIT_CANNOT_START
    if args.json:
        out.out(orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2).decode(), highlight=False)
    else:
        render(report, out)
    return EXIT_OK


class Starting:
    """The spinner's text, drawn afresh at each refresh: ``starting CMD … 12 s; waiting for
    pid 4711 to answer initialize (3 s of 60)``."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.since = time.monotonic()  # drawn from rich's refresh thread: not anyio's clock
        self.wait: StartWait | None = None

    def watch(self, wait: StartWait) -> None:
        self.wait = wait

    def __rich__(self) -> Text:
        text = f"starting {self.command} … {time.monotonic() - self.since:.0f} s"
        if self.wait is not None and self.wait.is_over():
            text += "; reading its tools, prompts and resources"
        elif self.wait is not None:
            text += f"; waiting for {self.wait.describe()}"
        return Text(text)


def main(argv: Sequence[str]) -> int:
    # The report says what the child's warnings would (noise, exits); keep stderr for errors.
    logging.getLogger("gateway").setLevel(logging.ERROR)
    try:
        return anyio.run(run_inspect, list(argv))
    except KeyboardInterrupt:
        return 130
