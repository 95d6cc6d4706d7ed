"""mcp-stdio-gateway: local stdio MCP servers behind one Streamable HTTP endpoint."""

__version__ = "0.1.0"
