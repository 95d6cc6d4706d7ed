"""A dual-era stdio server built with the official MCP Python SDK (``MCPServer.run`` drives
``serve_dual_era_loop``): the era is the one its client opens the connection with. Its tools
ask the client the legacy way, mid-call (``ctx.session.create_message``, ``ctx.elicit``),
which works only on a legacy connection: on a modern one the SDK has no back-channel.
``add_regional`` adds a tool at run time and says so the 2026-07-28 way (on the listens that
asked for tool list changes; on a legacy connection, to nobody).

``python tests/servers/sdk_dual.py``
"""

from __future__ import annotations

import warnings
from typing import Annotated

from mcp import types
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field

warnings.simplefilter("ignore")  # the SDK marks sampling and elicitation as deprecated in 2026-07-28

server = MCPServer("sdk-dual")


class Name(BaseModel):
    name: str


@server.tool()
async def ask_sampling(prompt: str, ctx: Context) -> str:
    """Ask the client's model to complete ``prompt``; return what it said."""
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))
    result = await ctx.session.create_message([message], max_tokens=20, related_request_id=ctx.request_id)
    content = result.content
    return f"sampled: {content.text if isinstance(content, types.TextContent) else content}"


@server.tool()
async def ask_name(ctx: Context) -> str:
    """Ask the user their name; greet them."""
    answer = await ctx.elicit("Your name?", Name)
    if answer.action != "accept" or answer.data is None:
        return f"no name ({answer.action})"
    return f"hello {answer.data.name}"


def regional(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
    """Serve from ``region`` (mirrored in the ``Mcp-Param-Region`` header)."""
    return f"served from {region}"


@server.tool()
async def add_regional(ctx: Context) -> str:
    """Add the tool ``regional``, then say the tool list changed (on the listens that asked)."""
    if "regional" not in {tool.name for tool in await server.list_tools()}:
        server.add_tool(regional)
    await ctx.notify_tools_changed()
    return "added"


if __name__ == "__main__":
    server.run("stdio")
