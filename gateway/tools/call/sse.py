"""The events of a Server-Sent Events body, as ``call`` reads them (the WHATWG parsing rules
it needs: fields, comments, events dispatched at a blank line).

Imports: the standard library only."""

from __future__ import annotations

from collections.abc import AsyncIterator


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str | None, int | None, str]]:
    """Each SSE event as ``(id, retry, data)``: its ``id`` and ``retry`` fields (None when
    absent) and its ``data:`` lines joined by newlines (maybe empty: a priming event). An
    event with no field at all (comments only: a keep-alive) is skipped."""
    data: list[str] = []
    event_id: str | None = None
    retry: int | None = None
    seen = False
    async for line in lines:
        if not line:
            if seen:
                yield event_id, retry, "\n".join(data)
            data, event_id, retry, seen = [], None, None, False
            continue
        if line.startswith(":"):
            continue  # a comment: keep-alive
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        seen = True
        if name == "data":
            data.append(value)
        elif name == "id" and "\0" not in value:
            event_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            retry = int(value)
    if seen:
        yield event_id, retry, "\n".join(data)
