"""A lean, dual-era stdio MCP server for the benchmarks (standard library only).

One thread, no per-call threads: it reads stdin in large chunks, answers every complete
line in the chunk, and writes the replies with one ``os.write``, so under pipelined load it
costs the gateway as little as a real server possibly could. Everything is answered in
arrival order (the server is serial; ``--work-ms`` makes each call take that long).

* Era: ``server/discover`` is answered (modern); ``initialize`` too (legacy). A request is
  answered modern-style when its ``params._meta`` names a protocol version.
* Tools:
  - ``echo {message}`` → one text block with the message;
  - ``blob {bytes}`` → one text block of that many ``x`` (large-reply runs);
  - ``progress {steps, interval_ms, log_every}`` → ``steps`` progress notifications (when the
    call has a ``progressToken``), each with ``message`` set to ``time.monotonic_ns()`` at the
    moment it is written (Linux's monotonic clock is shared by all processes, so a reader can
    compute the child-to-client latency), and after every ``log_every``-th of them one
    ``notifications/message`` (level info), then a result;
  - ``hold`` → one progress notification now, the result only when ``release`` is called
    (used to hold many SSE streams open at once); ``release`` → answers every held call,
    then itself with the count.
* Flags: ``--work-ms N`` sleeps N ms per ``tools/call`` before answering (the "slow"
  backend); ``--start-delay S`` sleeps S seconds before reading stdin (cold starts).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from typing import Any

MODERN = "2026-07-28"
LEGACY = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
SERVER_INFO = {"name": "bench-echo", "version": "1"}
READ_CHUNK = 1 << 20

TOOLS = [
    {
        "name": "echo",
        "description": "Answer with the message.",
        "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}},
    },
    {
        "name": "blob",
        "description": "Answer with a text of `bytes` bytes.",
        "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer"}}},
    },
    {
        "name": "progress",
        "description": "Send `steps` progress notifications, `interval_ms` apart, then answer.",
        "inputSchema": {
            "type": "object",
            "properties": {"steps": {"type": "integer"}, "interval_ms": {"type": "number"}},
        },
    },
    {"name": "hold", "description": "Answer when release is called.", "inputSchema": {"type": "object"}},
    {"name": "release", "description": "Answer every held call.", "inputSchema": {"type": "object"}},
]


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(1, view)
        view = view[written:]


class EchoServer:
    def __init__(self, work_seconds: float) -> None:
        self.work_seconds = work_seconds
        self.held: list[tuple[Any, bool]] = []

    def result(self, request_id: Any, result: dict[str, Any], modern: bool) -> bytes:
        if modern:
            result["resultType"] = "complete"
            result["_meta"] = {SERVER_INFO_KEY: SERVER_INFO}
        return encode({"jsonrpc": "2.0", "id": request_id, "result": result})

    def handle(self, line: bytes, out: list[bytes]) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            out.append(encode({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}}))
            return
        method = message.get("method")
        if "id" not in message or not isinstance(method, str):
            return  # notifications (initialized, cancelled) and responses need no answer
        request_id = message["id"]
        params = message.get("params") or {}
        meta = params.get("_meta") or {}
        modern = PROTOCOL_VERSION_KEY in meta
        if method == "tools/call":
            self.call(request_id, params, meta, modern, out)
        elif method == "server/discover":
            discover = {"supportedVersions": [MODERN], "capabilities": {"tools": {}}}
            out.append(self.result(request_id, discover, True))
        elif method == "initialize":
            requested = params.get("protocolVersion")
            version = requested if requested in LEGACY else LEGACY[-1]
            initialize = {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": SERVER_INFO}
            out.append(self.result(request_id, initialize, False))
        elif method == "tools/list":
            out.append(self.result(request_id, {"tools": TOOLS}, modern))
        elif method == "ping":
            out.append(self.result(request_id, {}, False))
        else:
            error = {"code": -32601, "message": f"method not found: {method}"}
            out.append(encode({"jsonrpc": "2.0", "id": request_id, "error": error}))

    def call(
        self, request_id: Any, params: dict[str, Any], meta: dict[str, Any], modern: bool, out: list[bytes]
    ) -> None:
        if self.work_seconds:
            time.sleep(self.work_seconds)
        name = params.get("name")
        arguments = params.get("arguments") or {}
        token = meta.get("progressToken")
        if name == "echo":
            text = str(arguments.get("message", ""))
        elif name == "blob":
            text = "x" * int(arguments.get("bytes", 0))
        elif name == "progress":
            steps, interval_ms = int(arguments.get("steps", 1)), float(arguments.get("interval_ms", 0))
            self.progress(token, steps, interval_ms, int(arguments.get("log_every", 0)), out)
            text = "done"
        elif name == "hold":
            if token is not None:
                out.append(encode(progress_notification(token, 0)))
            self.held.append((request_id, modern))
            return
        elif name == "release":
            for held_id, held_modern in self.held:
                out.append(self.result(held_id, text_result("released"), held_modern))
            text = str(len(self.held))
            self.held.clear()
        else:
            error = {"code": -32602, "message": f"unknown tool: {name}"}
            out.append(encode({"jsonrpc": "2.0", "id": request_id, "error": error}))
            return
        out.append(self.result(request_id, text_result(text), modern))

    @staticmethod
    def progress(token: Any, steps: int, interval_ms: float, log_every: int, out: list[bytes]) -> None:
        write_all(b"".join(out))  # what was answered before goes first
        out.clear()
        for step in range(1, steps + 1):
            if token is not None:
                write_all(encode(progress_notification(token, step, steps, str(time.monotonic_ns()))))
            if log_every and step % log_every == 0:
                write_all(encode(log_notification(step)))
            if interval_ms:
                time.sleep(interval_ms / 1000)


def progress_notification(
    token: Any, step: int, total: int | None = None, message: str | None = None
) -> dict[str, Any]:
    params: dict[str, Any] = {"progressToken": token, "progress": step}
    if total is not None:
        params["total"] = total
    if message is not None:
        params["message"] = message
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}


def log_notification(step: int) -> dict[str, Any]:
    params = {"level": "info", "logger": "bench", "data": f"after progress {step}"}
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": params}


def text_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


def serve(work_ms: float = 0.0, start_delay: float = 0.0) -> None:
    if start_delay:
        time.sleep(start_delay)
    server = EchoServer(work_ms / 1000)
    pending = b""
    while chunk := os.read(0, READ_CHUNK):
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        out: list[bytes] = []
        for line in lines:
            if line.strip():
                server.handle(line, out)
                if server.work_seconds and out:  # a slow server answers each call when it is done
                    write_all(b"".join(out))
                    out.clear()
        if out:
            write_all(b"".join(out))


def main(argv: list[str] | None = None, *, work_ms: float = 0.0) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-ms", type=float, default=work_ms, help="sleep this long per tools/call")
    parser.add_argument("--start-delay", type=float, default=0.0, help="sleep this long before reading stdin")
    args = parser.parse_args(argv)
    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):
        serve(args.work_ms, args.start_delay)
    sys.exit(0)


if __name__ == "__main__":
    main()
