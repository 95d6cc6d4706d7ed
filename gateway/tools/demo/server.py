"""The demo stdio MCP server: a dual-era server with tools that show a gateway off.

Run it as ``python -m gateway.tools.demo.server``. It speaks MCP (2026-07-28 and 2024-11-05 …
2025-11-25) on stdin/stdout and exits at stdin EOF. Its tools:

* ``echo`` returns its ``message``.
* ``countdown`` is slow. It sends progress once a step, stops silently when cancelled, and
  returns "done after N steps".
* ``fail`` returns a tool error (``isError: true``).
* ``crash`` writes to stderr and exits with code 3 without replying, as a crashing child would.

``add_demo_tools`` is shared with the test server, so both offer the same demo tools.
Imports: standard library and ``gateway.tools.demo.framework`` only.
"""

from __future__ import annotations

import sys
from typing import Final

from gateway.tools.demo.framework import (
    JsonObject,
    StdioServer,
    Tool,
    ToolContext,
    int_arg,
    object_schema,
    str_arg,
    text_result,
)

SERVER_NAME: Final = "mcp-stdio-gateway-demo"
SERVER_VERSION: Final = "0.1.0"
INSTRUCTIONS: Final = (
    "A demo server for mcp-stdio-gateway. Use echo to check the round trip, countdown to watch "
    "progress and try cancellation, fail to see a tool error, and crash to see the gateway "
    "restart a child that died."
)
CRASH_EXIT_CODE: Final = 3
# Bounds that keep one countdown under ~8 minutes, even at its slowest.
MAX_STEPS: Final = 100
MAX_INTERVAL_MS: Final = 5000


def echo(ctx: ToolContext, arguments: JsonObject) -> JsonObject:
    return text_result(str_arg(arguments, "message"))


def countdown(ctx: ToolContext, arguments: JsonObject) -> JsonObject:
    steps = int_arg(arguments, "steps", default=5, minimum=1, maximum=MAX_STEPS)
    interval_ms = int_arg(arguments, "interval_ms", default=200, minimum=0, maximum=MAX_INTERVAL_MS)
    for step in range(1, steps + 1):
        if ctx.cancelled.wait(interval_ms / 1000):
            return text_result("cancelled")  # the framework drops it: nothing is sent
        ctx.progress(step, steps, f"step {step} of {steps}")
    return text_result(f"done after {steps} steps")


def fail(ctx: ToolContext, arguments: JsonObject) -> JsonObject:
    return text_result(
        "fail: this tool always fails, on purpose. A tool error travels as a normal result "
        "with isError: true, so the model can read it. It is not a JSON-RPC error.",
        is_error=True,
    )


def crash(ctx: ToolContext, arguments: JsonObject) -> JsonObject:
    sys.stderr.write("demo: crashing on request\n")
    ctx.exit_process(CRASH_EXIT_CODE, f"demo: exiting with code {CRASH_EXIT_CODE} without replying")


def add_demo_tools(server: StdioServer) -> None:
    """Register echo, countdown, fail and crash on ``server``."""
    server.add_tool(
        Tool(
            "echo",
            "Return the given message unchanged, as text.",
            object_schema({"message": {"type": "string", "description": "Text to send back."}}, ["message"]),
            echo,
        )
    )
    server.add_tool(
        Tool(
            "countdown",
            "Count down slowly, sending a progress notification at each step. Cancel it at any "
            "time: it then stops and sends nothing more.",
            object_schema(
                {
                    "steps": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_STEPS,
                        "default": 5,
                        "description": "How many steps to count.",
                    },
                    "interval_ms": {
                        "type": "integer",
                        "minimum": 0,
                        "maximum": MAX_INTERVAL_MS,
                        "default": 200,
                        "description": "Milliseconds to wait before each step.",
                    },
                }
            ),
            countdown,
        )
    )
    server.add_tool(Tool("fail", "Always return a tool error (isError: true).", object_schema(), fail))
    server.add_tool(
        Tool(
            "crash",
            "Make the server process exit with code 3 without answering, to show how the gateway "
            "handles a child that dies.",
            object_schema(),
            crash,
        )
    )


def build_server() -> StdioServer:
    server = StdioServer(
        SERVER_NAME,
        SERVER_VERSION,
        eras=("modern", "legacy"),
        instructions=INSTRUCTIONS,
        capabilities={"tools": {"listChanged": False}},
    )
    add_demo_tools(server)
    return server


def main() -> None:
    try:
        build_server().serve()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
