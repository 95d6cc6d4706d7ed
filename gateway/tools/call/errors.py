"""Why a ``call`` failed, and the exit code each reason gets.

::

    ClientError            base; ``exit_code`` is what the process exits with
    ├── UsageError         bad command line (``--arg``, ``--json``, ``--header``), or a call a
    │                      conforming client must not make (a tool with invalid annotations): 2
    ├── ConnectionFailed   no MCP answer: connection refused, timeout, an HTTP answer that is
    │                      not JSON-RPC, a stream that ended before the reply, a failed handshake: 2
    ├── ServerError        the server answered with a JSON-RPC error, or the tool with
    │                      ``isError: true``: 1 (the message is the server's)
    └── (``--timeout``)    no answer within ``--timeout`` seconds: 124, as ``timeout(1)``
                           exits (not an exception here: the command's own deadline)

Foreign exceptions (``httpx``, ``orjson``) are translated where they occur, in
``gateway.tools.call.connection``, so the command only ever catches ``ClientError``.
"""

from __future__ import annotations

from typing import ClassVar

EXIT_OK = 0
EXIT_SERVER_ERROR = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 124
"""``--timeout`` expired: the code ``timeout(1)`` uses, so scripts can tell "too slow" from "refused"."""


class ClientError(Exception):
    exit_code: ClassVar[int] = EXIT_USAGE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageError(ClientError):
    """The command line cannot be turned into a conforming request."""


class ConnectionFailed(ClientError):
    """The endpoint could not be reached, or did not answer as an MCP server."""


class ServerError(ClientError):
    """The server (or the tool) said no; ``message`` is what it said."""

    exit_code = EXIT_SERVER_ERROR
