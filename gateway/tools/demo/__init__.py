"""Stdio MCP servers the project ships: a tiny framework and a demo server built on it."""
