"""``mcp-stdio-gateway call``: a small Streamable HTTP MCP client for the command line.

It calls one tool (or lists the tools) of any Streamable HTTP MCP endpoint, modern
(2026-07-28) or legacy (2025-03-26 … 2025-11-25), with raw ``httpx``: the ``mcp`` SDK is a
development dependency only. The modules, from the wire up:

* ``errors``: the exception tree and the exit code of each branch;
* ``connection``: one logical connection (era detection, the mirrored headers, legacy
  sessions, JSON and SSE answers);
* ``tools``: pure helpers over tool schemas (``--arg`` values, argument summaries, the
  ``Mcp-Param-*`` headers of a call);
* ``render``: what the user sees (results, the progress bar, the tool list), with ``rich``;
* ``command``: argument parsing and the flow of one invocation.
"""
