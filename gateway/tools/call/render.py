"""What ``call`` shows, drawn with ``rich``.

Contract:

* ``print_result`` writes a ``CallToolResult`` readably: text content as text, then
  ``structuredContent`` as pretty JSON, and every other content block as one line with its
  type and its size or URI (``[image] image/png, 12.1 KiB``). Nothing is printed twice: a
  text block that is just the structured JSON is left out, and so is a structured object
  that only wraps the text (``{"content": "<the text>"}``, as many servers send).
* ``ProgressView`` draws the call's ``notifications/progress`` (those carrying our token)
  as a live bar, with the server's message as its label; a call without progress leaves
  nothing behind. ``notifications/message`` lines are printed above the bar.
* ``Waiting`` is a spinner, on a terminal only, while the first answer is awaited (a
  gateway answers once its server has started: an ``npx`` cold start takes seconds), with
  the seconds so far and what the gateway says it waits for (``startwatch``).
  ``Screen`` knows the one live display (spinner or bar) and pauses it while the user
  answers a server's question.
* ``print_tools`` lists tools with their arguments, ``print_hidden`` the ones left out;
  ``print_error`` writes ``error: …``; ``print_raw`` writes JSON for ``--raw``.

Output goes to the ``Console`` given: the command passes stdout for results and stderr for
progress and errors, so ``call … > out.txt`` keeps only the result.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Protocol

import orjson
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from gateway.protocol.handshake import ChildInfo
from gateway.protocol.jsonrpc import PROGRESS, ErrorReply, JsonObject, Notification
from gateway.protocol.xmcpheader import tool_header_params
from gateway.tools.call.tools import argument_summary, first_line

LOG_MESSAGE = "notifications/message"


# --- results ----------------------------------------------------------------------------------------


def print_result(result: JsonObject, console: Console) -> None:
    structured = result.get("structuredContent")
    content = result.get("content")
    texts = [
        b["text"]
        for b in (content if isinstance(content, list) else [])
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
    if _wraps_text(structured, texts):
        structured = None
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            if structured is not None and _same_json(block["text"], structured):
                continue
            console.print(Text(block["text"]))
        else:
            console.print(Text(block_summary(block), style="cyan"))
    if structured is not None:
        console.print_json(data=structured, indent=2)


def block_summary(block: JsonObject) -> str:
    """One line for a content block that is not text."""
    kind = block.get("type")
    if kind in ("image", "audio"):
        data = block.get("data")
        size = _size(_base64_size(data)) if isinstance(data, str) else "no data"
        return f"[{kind}] {block.get('mimeType', 'unknown type')}, {size}"
    if kind == "resource_link":
        details = ", ".join(str(block[k]) for k in ("name", "mimeType") if isinstance(block.get(k), str))
        return f"[resource link] {block.get('uri', '?')}" + (f" ({details})" if details else "")
    if kind == "resource" and isinstance(block.get("resource"), dict):
        resource = block["resource"]
        if isinstance(resource.get("text"), str):
            size = f"{len(resource['text'])} characters of text"
        elif isinstance(resource.get("blob"), str):
            size = _size(_base64_size(resource["blob"]))
        else:
            size = "no contents"
        mime = f"{resource['mimeType']}, " if isinstance(resource.get("mimeType"), str) else ""
        return f"[resource] {resource.get('uri', '?')} ({mime}{size})"
    return f"[{kind if isinstance(kind, str) else 'unknown'} content]"


def _wraps_text(structured: Any, texts: list[str]) -> bool:
    """Whether ``structured`` only repeats the text blocks: an object whose every value is
    one of the texts (or all of them joined)."""
    if not isinstance(structured, dict) or not structured or not texts:
        return False
    shown = {*texts, "\n".join(texts), "".join(texts)}
    return all(isinstance(value, str) and value in shown for value in structured.values())


def _same_json(text: str, value: Any) -> bool:
    try:
        return bool(orjson.loads(text) == value)
    except orjson.JSONDecodeError:
        return False


def _base64_size(data: str) -> int:
    compact = "".join(data.split())
    return max(0, len(compact) * 3 // 4 - compact[-2:].count("="))


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size / (1024 * 1024):.1f} MiB"


def error_text(reply: ErrorReply) -> str:
    """A JSON-RPC error as the user reads it: the message, the code, and ``data`` if any."""
    text = f"{reply.message} (JSON-RPC error {reply.code})"
    data = reply.error.get("data")
    if data is not None:
        text += "\n" + orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()
    return text


def print_error(console: Console, message: str) -> None:
    console.print(Text.assemble(("error: ", "bold red"), message))


def print_raw(console: Console, value: Any) -> None:
    """``--raw``: the value as indented JSON, nothing else (so it can be piped to ``jq``)."""
    console.out(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode(), highlight=False)


# --- live displays ------------------------------------------------------------------------------------


class _Live(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...


class Screen:
    """The one live display on stderr (rich allows one at a time), for pausing it."""

    def __init__(self) -> None:
        self.live: _Live | None = None

    @contextmanager
    def paused(self) -> Iterator[None]:
        live = self.live
        if live is not None:
            live.stop()
        try:
            yield
        finally:
            if live is not None and self.live is live:
                live.start()


class Waiting:
    """A spinner until ``stop()`` (or exit), on a terminal only, with the seconds waited and,
    once ``on_detail`` gives one, what the gateway is waiting for (``startwatch``)."""

    def __init__(self, console: Console, url: str, screen: Screen | None = None) -> None:
        self.console = console
        self.screen = screen or Screen()
        self.url = url
        self.detail: str | None = None
        self.since = time.monotonic()
        self._status = console.status(self)  # drawn afresh at each refresh: __rich__
        self._running = False

    def __rich__(self) -> Text:
        waited = f"{time.monotonic() - self.since:.0f} s"
        why = self.detail or "a gateway answers once its server has started"
        return Text(f"waiting for {self.url} to answer ({waited}; {why})")

    @property
    def running(self) -> bool:
        return self._running

    def on_detail(self, detail: str | None) -> bool:
        """Show ``detail`` (None: the time alone); False once the spinner has stopped."""
        self.detail = detail
        return self._running

    def __enter__(self) -> Waiting:
        if self.console.is_terminal:
            self._status.start()
            self._running = True
            self.screen.live = self._status
        return self

    def stop(self) -> None:
        if self._running:
            self._running = False
            self._status.stop()
            if self.screen.live is self._status:
                self.screen.live = None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


# --- progress -----------------------------------------------------------------------------------------


class ProgressView:
    """A live bar for one call; enter before sending, feed ``on_notification``, exit after."""

    def __init__(self, console: Console, label: str, token: str | int, screen: Screen | None = None) -> None:
        self.label = label
        self.token = token
        self.updates = 0
        self.screen = screen or Screen()
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}", markup=False),  # the text is the server's
            BarColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        self._task: TaskID | None = None

    def __enter__(self) -> ProgressView:
        # On a terminal a spinner runs from the start; elsewhere (a pipe, a log file) the bar
        # starts with the first progress, so a call without progress writes nothing.
        if self._progress.console.is_terminal:
            self._start()
        return self

    def _start(self) -> TaskID:
        self._progress.start()
        self.screen.live = self._progress
        self._task = self._progress.add_task(self.label, total=None)
        return self._task

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._task is None:
            return
        if self.updates == 0:
            self._progress.remove_task(self._task)  # no progress came: leave no empty bar behind
        self._progress.stop()
        if self.screen.live is self._progress:
            self.screen.live = None

    def on_notification(self, note: Notification) -> None:
        params = note.params or {}
        if note.method == PROGRESS and params.get("progressToken") == self.token:
            self._on_progress(self._task if self._task is not None else self._start(), params)
        elif note.method == LOG_MESSAGE:
            level, data = params.get("level", "info"), params.get("data")
            shown = data if isinstance(data, str) else orjson.dumps(data).decode()
            self._progress.console.print(Text(f"[{level}] {shown}", style="dim"))

    def on_status(self, text: str) -> None:
        """A task's ``statusMessage`` while ``call`` polls it: the bar's label, no number."""
        task = self._task if self._task is not None else self._start()
        self.updates += 1
        self._progress.update(task, description=f"{self.label}: {text}")
        self._progress.refresh()

    def _on_progress(self, task: TaskID, params: JsonObject) -> None:
        progress, total, message = params.get("progress"), params.get("total"), params.get("message")
        if not isinstance(progress, (int, float)) or isinstance(progress, bool):
            return
        known_total = total if isinstance(total, (int, float)) and not isinstance(total, bool) and total > 0 else None
        label = message if isinstance(message, str) and message else self.label
        if known_total is None:
            label += f" ({progress:g})"
        self.updates += 1
        self._progress.update(task, completed=progress, total=known_total, description=label)
        self._progress.refresh()  # every step is drawn, however fast they come


# --- tool listings ------------------------------------------------------------------------------------


def print_tools(
    console: Console, info: ChildInfo | None, tools: list[JsonObject], child_era: str | None = None
) -> None:
    """The tools; the header names the endpoint's era and, behind a gateway, the child's."""
    if info is not None:
        name = info.server_info.get("name")
        version = info.server_info.get("version")
        who = " ".join(str(part) for part in (name, version) if part) or "server"
        era = f"endpoint {info.era.value} ({info.version})"
        if child_era:
            era += f" · child {child_era}"
        console.print(Text(f"{who} · {era} · {len(tools)} tools", style="bold"))
    for tool in tools:
        console.print()
        description = tool.get("description")
        line = Text(str(tool.get("name")), style="bold green")
        if isinstance(description, str) and first_line(description):
            line.append(f"  {first_line(description)}")
        console.print(line)
        schema = tool.get("inputSchema")
        arguments = argument_summary(schema, tool_header_params(schema))
        if not arguments:
            console.print(Text("    (no arguments)", style="dim"))
        for argument in arguments:
            console.print(
                Text(f"    {argument.short()}" + (f"  — {argument.description}" if argument.description else ""))
            )


def print_hidden(console: Console, dropped: Iterable[tuple[str, str]]) -> None:
    """Tools left out because HTTP clients must drop them (invalid ``x-mcp-header``)."""
    for name, reason in dropped:
        console.print(Text(f"hidden: tool {name!r} has an invalid x-mcp-header annotation: {reason}", style="yellow"))
