"""While ``call`` waits for its first answer, what the gateway behind the URL is waiting for.

A gateway answers once its server has started, and an ``npx`` cold start or a slow server
can take a minute. The gateway knows why (``/status``: each starting child's
``waiting_for``, such as ``pid 4711 to answer initialize (12 s of 60)``, and a pool's
``last_error`` while it retries), so ``watch`` reads its ``/status`` every
``STATUS_POLL_INTERVAL`` seconds while the spinner runs and gives ``on_detail`` one line to
show beside the elapsed time. It is a courtesy: any failure (not a gateway, ``/status``
refused or unreachable) shows nothing and the spinner goes on with the time alone.

``status_url`` and ``describe`` are pure; ``watch`` does the I/O, with the same extra
headers (a token) and TLS trust as the call, on the same origin only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Final, TypeVar

import anyio
import httpx

STATUS_POLL_INTERVAL: Final = 2.0
"""Seconds between two reads of ``/status`` while the first answer is awaited (a person
watches a spinner: every 2 s is fresh enough, and one small GET is nothing to the gateway)."""
STATUS_TIMEOUT: Final = 5.0
"""Seconds one read of ``/status`` may take; a slow one is skipped."""
MAX_DETAIL_CHARS: Final = 300
"""A start error quoted in the spinner is cut here (the whole one comes with the answer)."""

T = TypeVar("T")


def status_url(url: str) -> tuple[str, str | None] | None:
    """``/status`` beside the MCP endpoint ``url``, and the server name the path names
    (None: ``/mcp``, a single server); None when the path is not a gateway's endpoint."""
    parsed = httpx.URL(url)
    path = parsed.path.rstrip("/")
    head, _, last = path.rpartition("/")
    if last != "mcp":
        return None
    name = None
    prefix, _, maybe_name = head.rpartition("/")
    if prefix.endswith("/servers") or prefix == "/servers":
        name, head = maybe_name, prefix.removesuffix("/servers")
    return str(parsed.copy_with(path=f"{head}/status", query=None, fragment=None)), name


def describe(status: Any, name: str | None) -> str | None:
    """One line on what the server ``name`` (None: the only one) is doing, from ``/status``."""
    servers = status.get("servers") if isinstance(status, dict) else None
    if not isinstance(servers, list):
        return None
    chosen = [s for s in servers if isinstance(s, dict) and (name is None or s.get("name") == name)]
    if len(chosen) != 1:
        return None
    pools = chosen[0].get("pools")
    pools = list(pools.values()) if isinstance(pools, dict) else []
    children = [c for p in pools if isinstance(p, dict) for c in p.get("children") or [] if isinstance(c, dict)]
    waits = [c["waiting_for"] for c in children if isinstance(c.get("waiting_for"), str)]
    if waits:
        return f"the gateway is waiting for {waits[0]}"
    errors = [p["last_error"] for p in pools if isinstance(p, dict) and isinstance(p.get("last_error"), str)]
    if errors:
        return f"its server's last start failed ({errors[0][:MAX_DETAIL_CHARS]}); the gateway retries"
    if any(c.get("state") == "starting" for c in children):
        return "the gateway is starting its server"
    return None


async def watch(
    url: str,
    headers: Mapping[str, str],
    verify: Any,
    on_detail: Callable[[str | None], bool],
) -> None:
    """Read ``/status``, telling ``on_detail`` what it says, until ``on_detail`` returns
    False (the spinner stopped) or the watch is cancelled."""
    where = status_url(url)
    if where is None:
        return
    target, name = where
    async with httpx.AsyncClient(timeout=STATUS_TIMEOUT, verify=verify) as http:
        going = True
        while going:
            await anyio.sleep(STATUS_POLL_INTERVAL)
            try:
                reply = await http.get(target, headers=dict(headers))
                going = on_detail(describe(reply.json(), name) if reply.status_code == 200 else None)
            except (httpx.HTTPError, ValueError):
                going = on_detail(None)


async def beside(body: Callable[[], Awaitable[T]], watcher: Callable[[], Coroutine[Any, Any, None]] | None) -> T:
    """``body()``, with ``watcher()`` running until it returns; ``body``'s exception is raised
    as it is (not in an exception group)."""
    if watcher is None:
        return await body()
    failure: Exception | None = None
    result: T | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(watcher)
        try:
            result = await body()
        except Exception as exc:
            failure = exc
        finally:
            tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result  # type: ignore[return-value]
