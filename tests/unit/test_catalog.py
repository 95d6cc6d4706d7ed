"""The tool catalog's walk over tools/list pages, with a fake child (no process needed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.protocol.handshake import ChildInfo
from gateway.protocol.jsonrpc import JsonObject, Result
from gateway.protocol.versions import Era
from gateway.relay.catalog import PAGE_CAP, ToolCatalog

pytestmark = pytest.mark.anyio

ANNOTATED = {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}


@dataclass
class Spec:
    label: str = "fake"


@dataclass
class FakeChild:
    """Answers tools/list from ``pages`` (cursor → (tools, next cursor)); counts the calls."""

    pages: dict[str | None, tuple[list[JsonObject], str | None]]
    info: ChildInfo = field(default_factory=lambda: ChildInfo(Era.LEGACY, "2025-11-25"))
    spec: Spec = field(default_factory=Spec)
    tools_generation: int = 0
    calls: list[Any] = field(default_factory=list)

    async def request(self, method: str, params: JsonObject | None, *, timeout: float | None = None) -> Result:
        cursor = (params or {}).get("cursor")
        self.calls.append(cursor)
        tools, next_cursor = self.pages[cursor]
        result: JsonObject = {"tools": tools}
        if next_cursor is not None:
            result["nextCursor"] = next_cursor
        return Result(len(self.calls), result)

    def __hash__(self) -> int:  # the catalog keys a weak dictionary by child
        return id(self)


def tool(name: str, schema: JsonObject | None = None) -> JsonObject:
    return {"name": name, "inputSchema": schema or {"type": "object"}}


async def test_every_page_is_walked_and_the_result_is_cached_per_generation() -> None:
    child = FakeChild({None: ([tool("a")], "p2"), "p2": ([tool("b", ANNOTATED)], None)})
    catalog = ToolCatalog()
    params = await catalog.header_params(child, "b")  # type: ignore[arg-type]
    assert [p.header for p in params] == ["Region"]
    assert await catalog.header_params(child, "a") == ()  # type: ignore[arg-type]
    assert child.calls == [None, "p2"]  # walked once
    child.tools_generation += 1  # notifications/tools/list_changed
    await catalog.header_params(child, "b")  # type: ignore[arg-type]
    assert child.calls == [None, "p2", None, "p2"]


async def test_a_repeated_cursor_ends_the_walk() -> None:
    child = FakeChild({None: ([tool("a")], "loop"), "loop": ([tool("b", ANNOTATED)], "loop")})
    params = await ToolCatalog().header_params(child, "b")  # type: ignore[arg-type]
    assert [p.header for p in params] == ["Region"]
    assert child.calls == [None, "loop"]


async def test_a_child_that_paginates_forever_is_stopped_at_the_page_cap() -> None:
    pages: dict[str | None, tuple[list[JsonObject], str | None]] = {None: ([tool("t0")], "1")}
    for n in range(1, PAGE_CAP + 10):
        pages[str(n)] = ([tool(f"t{n}")], str(n + 1))
    child = FakeChild(pages)
    assert await ToolCatalog().header_params(child, "t5") == ()  # type: ignore[arg-type]
    assert len(child.calls) == PAGE_CAP


async def test_invalid_tools_are_hidden_with_their_reason() -> None:
    bad = {"type": "object", "properties": {"n": {"type": "number", "x-mcp-header": "N"}}}
    child = FakeChild({None: ([tool("good"), tool("bad", bad)], None)})
    catalog = ToolCatalog()
    await catalog.header_params(child, "good")  # type: ignore[arg-type]
    assert "number" in (catalog.hidden_reason(child, "bad") or "")  # type: ignore[arg-type]
    assert catalog.hidden_reason(child, "good") is None  # type: ignore[arg-type]
    visible = catalog.visible_tools(child, {"tools": [tool("good"), tool("bad", bad)]})  # type: ignore[arg-type]
    assert [t["name"] for t in visible["tools"]] == ["good"]


async def test_what_is_known_of_a_tool_is_read_only_while_the_list_is_current() -> None:
    bad = {"type": "object", "properties": {"n": {"type": "number", "x-mcp-header": "N"}}}
    child = FakeChild({None: ([tool("b", ANNOTATED), tool("bad", bad)], None)})
    catalog = ToolCatalog()
    assert catalog.known(child, "b") is None  # type: ignore[arg-type]  # not listed yet: header_params lists
    await catalog.header_params(child, "b")  # type: ignore[arg-type]
    known = catalog.known(child, "b")  # type: ignore[arg-type]
    assert known is not None
    assert [p.header for p in known[0]] == ["Region"]
    assert known[1] is None
    bad_known = catalog.known(child, "bad")  # type: ignore[arg-type]
    assert bad_known is not None
    assert bad_known[0] == ()
    assert "number" in (bad_known[1] or "")
    assert catalog.known(child, "missing") == ((), None, None)  # type: ignore[arg-type]
    child.tools_generation += 1  # notifications/tools/list_changed: listed again before it is known
    assert catalog.known(child, "b") is None  # type: ignore[arg-type]
    assert child.calls == [None]


async def test_what_is_known_of_a_tool_names_the_task_support_the_catalog_gives() -> None:
    """The steps read a called tool's ``taskSupport`` from ``known`` (one lookup per call): it is
    ``task_support``'s, for every tool, and listed again after a tools/list_changed."""
    required = {**tool("r"), "execution": {"taskSupport": "required"}}
    optional = {**tool("o", ANNOTATED), "execution": {"taskSupport": "optional"}}
    child = FakeChild({None: ([required, optional, tool("plain")], None)})
    catalog = ToolCatalog()
    await catalog.header_params(child, "r")  # type: ignore[arg-type]
    for name in ("r", "o", "plain", "missing"):
        known = catalog.known(child, name)  # type: ignore[arg-type]
        assert known is not None
        assert known[2] == catalog.task_support(child, {"name": name})  # type: ignore[arg-type]
    assert [catalog.known(child, n)[2] for n in ("r", "o", "plain")] == ["required", "optional", None]  # type: ignore[arg-type,index]
    child.pages[None] = ([tool("r")], None)  # the tool no longer requires a task
    child.tools_generation += 1
    assert catalog.known(child, "r") is None  # type: ignore[arg-type]
    await catalog.header_params(child, "r")  # type: ignore[arg-type]
    assert catalog.known(child, "r") == ((), None, None)  # type: ignore[arg-type]
