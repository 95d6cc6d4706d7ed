"""Each child's tool list, walked once and cached, for ``Mcp-Param-*`` validation.

The gateway rewrites ids, so it "processes the body" and must check every ``Mcp-Param-*``
header of a modern ``tools/call`` against the argument the tool's ``x-mcp-header``
annotations name (digest §2.3). That needs the tool's ``inputSchema``: ``ToolCatalog``
fetches the child's whole ``tools/list`` lazily (every page, with a guard against a
repeated cursor and a page cap), once per child and per list generation — the child's
``notifications/tools/list_changed`` bumps ``StdioChild.tools_generation`` and the next
lookup walks the list again. Concurrent lookups share one walk.

Tools whose annotations break a rule are left out of every ``tools/list`` answer that HTTP
clients get (``visible_tools``), with one warning per child and tool naming the reason.
"""

from __future__ import annotations

import logging
import weakref
from typing import Final

import anyio

from gateway.errors import ChildError
from gateway.protocol import xmcpheader
from gateway.protocol.handshake import modern_meta
from gateway.protocol.jsonrpc import JsonObject, Result
from gateway.protocol.versions import Era
from gateway.protocol.xmcpheader import HeaderParam, InvalidToolAnnotation
from gateway.stdio.child import StdioChild

log = logging.getLogger("gateway.catalog")

PAGE_CAP: Final = 100
"""Pages of tools/list walked at most; a child that paginates forever cannot hang a call."""
WALK_TIMEOUT: Final = 30.0
"""Seconds the whole walk may take."""


Known = tuple[tuple[HeaderParam, ...], str | None, str | None]
"""What ``ToolCatalog.known`` tells of a tool: its header parameters, why it is hidden from HTTP
clients (None: it is not), its ``execution.taskSupport`` (None: not declared)."""


class _Entry:
    def __init__(self) -> None:
        self.generation = -1
        self.params: dict[str, tuple[HeaderParam, ...]] = {}
        self.hidden: dict[str, str] = {}  # tool → why its annotations make it invalid
        self.task_support: dict[str, str] = {}  # tool → its execution.taskSupport (2025-11-25 children)
        self.loading: anyio.Event | None = None
        self.warned: set[str] = set()


class ToolCatalog:
    def __init__(self, gateway_version: str = "0") -> None:
        self._entries: weakref.WeakKeyDictionary[StdioChild, _Entry] = weakref.WeakKeyDictionary()
        self._gateway_version = gateway_version

    def _entry(self, child: StdioChild) -> _Entry:
        entry = self._entries.get(child)
        if entry is None:
            entry = self._entries[child] = _Entry()
        return entry

    async def header_params(self, child: StdioChild, tool: str) -> tuple[HeaderParam, ...]:
        """The annotated parameters of ``tool`` on ``child`` (empty if none or unknown)."""
        entry = self._entry(child)
        while entry.generation != child.tools_generation:
            if entry.loading is not None:
                await entry.loading.wait()
                continue
            entry.loading = anyio.Event()
            generation = child.tools_generation
            try:
                entry.params, entry.hidden, entry.task_support = await self._walk(child, entry)
                entry.generation = generation
            finally:
                entry.loading.set()
                entry.loading = None
        return entry.params.get(tool, ())

    def known(self, child: StdioChild, tool: str) -> Known | None:
        """``tool``'s annotated parameters, why it is hidden from HTTP clients and its
        ``execution.taskSupport`` (as ``task_support``), when the list of ``child``'s tools is
        loaded for its current generation (else None: ``header_params`` loads it). Every call
        over HTTP asks this, so it is one lookup and no coroutine."""
        entry = self._entries.get(child)
        if entry is None or entry.generation != child.tools_generation:
            return None
        return entry.params.get(tool, ()), entry.hidden.get(tool), entry.task_support.get(tool)

    def task_support(self, child: StdioChild, params: JsonObject | None) -> str | None:
        """The called tool's ``execution.taskSupport`` as the child declared it (after
        ``header_params`` loaded the list): ``forbidden``, ``optional``, ``required`` or None."""
        entry = self._entries.get(child)
        name = (params or {}).get("name")
        return entry.task_support.get(name) if entry is not None and isinstance(name, str) else None

    def hidden_reason(self, child: StdioChild, tool: str) -> str | None:
        """Why ``tool`` is hidden from HTTP clients (after ``header_params`` loaded the list)."""
        entry = self._entries.get(child)
        return entry.hidden.get(tool) if entry is not None else None

    async def _walk(
        self, child: StdioChild, entry: _Entry
    ) -> tuple[dict[str, tuple[HeaderParam, ...]], dict[str, str], dict[str, str]]:
        params: dict[str, tuple[HeaderParam, ...]] = {}
        hidden: dict[str, str] = {}
        task_support: dict[str, str] = {}
        cursor: str | None = None
        seen: set[str] = set()
        with anyio.move_on_after(WALK_TIMEOUT):
            for _ in range(PAGE_CAP):
                try:
                    reply = await child.request("tools/list", self._page_params(child, cursor))
                except ChildError as exc:
                    log.warning("could not list the tools of %s: %s", child.spec.label, exc.detailed)
                    break
                if not isinstance(reply, Result):
                    break
                for tool in reply.result.get("tools") or []:
                    if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                        try:
                            params[tool["name"]] = xmcpheader.tool_header_params(tool.get("inputSchema"))
                        except InvalidToolAnnotation as exc:
                            hidden[tool["name"]] = exc.reason
                            self._warn(child, entry, tool["name"], exc.reason)
                        execution = tool.get("execution")
                        support = execution.get("taskSupport") if isinstance(execution, dict) else None
                        if isinstance(support, str):
                            task_support[tool["name"]] = support
                next_cursor = reply.result.get("nextCursor")
                if not isinstance(next_cursor, str) or not next_cursor:
                    break
                if next_cursor in seen:
                    log.warning("%s repeated the tools/list cursor %r; stopped walking", child.spec.label, next_cursor)
                    break
                seen.add(next_cursor)
                cursor = next_cursor
        return params, hidden, task_support

    def _page_params(self, child: StdioChild, cursor: str | None) -> JsonObject | None:
        params: JsonObject = {}
        if cursor is not None:
            params["cursor"] = cursor
        if child.info is not None and child.info.era is Era.MODERN:
            params["_meta"] = modern_meta(self._gateway_version)
        return params or None

    def visible_tools(self, child: StdioChild, result: JsonObject) -> JsonObject:
        """A ``tools/list`` result without the tools whose annotations are invalid."""
        tools = result.get("tools")
        if not isinstance(tools, list):
            return result
        kept, dropped = xmcpheader.filter_tools(tools)
        if not dropped:
            return result
        entry = self._entry(child)
        for name, reason in dropped:
            self._warn(child, entry, name, reason)
        return {**result, "tools": kept}

    @staticmethod
    def _warn(child: StdioChild, entry: _Entry, name: str, reason: str) -> None:
        if name not in entry.warned:
            entry.warned.add(name)
            log.warning("tool %r of %s is hidden from HTTP clients: %s", name, child.spec.label, reason)
