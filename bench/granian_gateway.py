"""The gateway's ASGI app served by Granian instead of uvicorn: the engine comparison's other side.

    python -m bench.granian_gateway [gateway flags] -- command ...

The same settings, routers and app as ``python -m gateway`` (``gateway.server.build_app``),
served by Granian's embedded server in this process (its HTTP work in Rust threads, the app
on this process's event loop, uvloop), so that ``bench`` measures the process's CPU and memory
the same way for both engines. Not a supported way to run the gateway: what it keeps and loses
of the gateway's HTTP-level guarantees is in ``docs/architecture.md`` ("The HTTP engine").
Needs ``granian`` (``bench/install-peers.sh`` installs it into ``bench/.peers``).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import Any

from gateway.cli import parse_settings
from gateway.http.connection import HEADER_TIMEOUT, MAX_HEAD_BYTES
from gateway.ops import logs
from gateway.server import build_app

log = logging.getLogger("gateway")


def main(argv: list[str]) -> int:
    from bench.procs import GRANIAN_DIR

    if GRANIAN_DIR.is_dir():
        sys.path.insert(0, str(GRANIAN_DIR))
    import uvloop
    from granian.constants import Interfaces
    from granian.http import HTTP1Settings
    from granian.server.embed import Server

    settings = parse_settings(argv)
    listener = logs.configure(settings.log_level, settings.log_format)
    app = build_app(settings)
    http1 = HTTP1Settings(
        header_read_timeout=int(HEADER_TIMEOUT * 1000),
        # Granian's floor is 8 KiB; its buffer holds the head, so this is the nearest bound.
        max_buffer_size=max(MAX_HEAD_BYTES, 8192),
    )
    server: Any = Server(
        app,
        address=settings.host,
        port=settings.port,
        interface=Interfaces.ASGI,
        http1_settings=http1,
        backlog=2048,
        log_enabled=False,
        log_access=False,
    )

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, server.stop)
        log.info("running on http://%s:%d (granian, embedded)", settings.host, settings.port)
        await server.serve()

    try:
        uvloop.run(serve())
    finally:
        listener.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
