"""``/ui``: the operator's page, a read-only HTML view of exactly what ``/status`` returns.

``render_page(status)`` turns the ``/status`` document into one self-contained page: per
server its pools, each child (pid, state, era, protocol version, uptime, requests in
flight, served, the last stderr lines), the queue, restarts, sessions, listens and parked
calls; then the gateway's recent warnings and errors. Every value is HTML-escaped (server
names, commands, stderr and error messages are not ours). The page refreshes itself with a
``<meta http-equiv="refresh">``: no script, no framework, no build step. It takes the
operator's credential, as ``/status`` does (``gateway.http.operator``, which also serves the
login form), and is answered with a ``Content-Security-Policy`` that allows nothing but its
inline style.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from html import escape
from typing import Any, Final

REFRESH_SECONDS: Final = 5
"""How often the page reloads itself: live enough to watch a start-up, light on the gateway."""
CONTENT_SECURITY_POLICY: Final = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"

STYLE: Final = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1b1f24; background: #fff; }
h1 { font-size: 1.4em; margin: 0 0 .2em; } h2 { font-size: 1.15em; margin: 1.4em 0 .3em; }
h3 { font-size: 1em; margin: .8em 0 .2em; font-weight: 600; } p { margin: .3em 0; }
.meta, .dim { color: #59636e; } code, td.mono { font-family: ui-monospace, monospace; font-size: 12.5px; }
table { border-collapse: collapse; margin: .3em 0 .8em; }
th, td { border: 1px solid #d1d9e0; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #f6f8fa; font-weight: 600; }
.badge { display: inline-block; padding: 0 .5em; border-radius: 1em; font-size: .85em; }
.ok { background: #dafbe1; color: #116329; } .bad { background: #ffebe9; color: #a40e26; }
.warn { background: #fff8c5; color: #7d4e00; }
pre { margin: 0; white-space: pre-wrap; max-width: 60em; }
ol.errors li { margin-bottom: .3em; }
"""


def _e(value: object) -> str:
    return escape("—" if value is None else str(value), quote=True)


def duration(seconds: object) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 07 min``: an uptime a person reads at a glance."""
    if not isinstance(seconds, (int, float)):
        return "—"
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def _badge(text: str, kind: str) -> str:
    return f'<span class="badge {kind}">{_e(text)}</span>'


def _state_badge(state: object) -> str:
    kind = {"ready": "ok", "starting": "warn"}.get(str(state), "bad")
    return _badge(str(state), kind)


def _table(headers: Iterable[str], rows: Iterable[Iterable[str]], css: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(cells) + "</tr>" for cells in rows)
    klass = f' class="{css}"' if css else ""
    return f"<table{klass}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _child_row(child: Mapping[str, Any]) -> list[str]:
    stderr = child.get("stderr") or []
    tail = "<pre>" + _e("\n".join(str(line) for line in stderr)) + "</pre>" if stderr else '<span class="dim">—</span>'
    return [
        f'<td class="mono pid">{_e(child.get("pid"))}</td>',
        f"<td>{_state_badge(child.get('state'))}</td>",
        f"<td>{_e(child.get('era'))}</td>",
        f'<td class="mono">{_e(child.get("protocol_version"))}</td>',
        f"<td>{_e(duration(child.get('uptime_seconds')))}</td>",
        f"<td>{_e(child.get('in_flight'))}</td>",
        f"<td>{_e(child.get('served'))}</td>",
        f'<td class="mono">{tail}</td>',
    ]


def _pool(label: str, pool: Mapping[str, Any]) -> str:
    children = pool.get("children") or []
    failing = _badge("failing", "bad") + " " if pool.get("failing") else ""
    facts = (
        f"queue: {_e(pool.get('waiting'))} waiting · spawns: {_e(pool.get('spawns'))} · "
        f"restarts: {_e(pool.get('restarts'))} · children: {len(children)}"
    )
    parts = [f'<h3 class="pool">{failing}pool <code>{_e(label)}</code></h3>', f'<p class="meta">{facts}</p>']
    if pool.get("last_error"):
        parts.append(f'<p class="bad last-error">last error: {_e(pool["last_error"])}</p>')
    headers = ("pid", "state", "era", "protocol", "uptime", "in flight", "served", "stderr (last lines)")
    if children:
        parts.append(_table(headers, (_child_row(c) for c in children), "children"))
    else:
        parts.append('<p class="dim">no child running</p>')
    return "".join(parts)


def _server(server: Mapping[str, Any]) -> str:
    name = server.get("name")
    ready = _state_badge(server.get("state") or ("ready" if server.get("ready") else "not ready"))
    if server.get("ready_required"):
        ready += " " + _badge("required", "dim")
    command = " ".join(str(part) for part in server.get("command") or [])
    counts = (
        f'<p class="meta counts">isolation: {_e(server.get("isolation"))} · sessions: {_e(server.get("sessions"))} · '
        f"listens: {_e(server.get('listens'))} · parked calls: {_e(server.get('parked_calls'))}</p>"
    )
    pools = server.get("pools") or {}
    body = "".join(_pool(str(label), pool) for label, pool in pools.items()) or '<p class="dim">no pool open</p>'
    if server.get("status_error"):  # reading this server failed (gateway.http.routes)
        body = f'<p class="meta">status unavailable: {_e(server.get("status_error"))}</p>'
    return (
        f'<section class="server" data-server="{_e(name)}"><h2>{_e(name)} {ready}</h2>'
        f'<p class="meta">command: <code>{_e(command)}</code></p>{counts}{body}</section>'
    )


def _errors(entries: Iterable[Mapping[str, Any]]) -> str:
    items = [
        f'<li><span class="dim">{_e(e.get("time"))} {_e(e.get("level"))} {_e(e.get("logger"))}</span> '
        f"{_e(e.get('message'))}</li>"
        for e in entries
    ]
    if not items:
        return '<h2>recent errors</h2><p class="dim">none</p>'
    return '<h2>recent errors</h2><ol class="errors">' + "".join(items) + "</ol>"


def render_page(status: Mapping[str, Any], *, refresh_seconds: int = REFRESH_SECONDS) -> str:
    servers = status.get("servers") or []
    keys = status.get("state_keys") or {}
    meta = (
        f"version {_e(status.get('version'))} · {len(servers)} server(s) · "
        f"{_e(status.get('sessions'))} legacy session(s) · "
        + (f"state key {_e(keys.get('current'))} (+{len(keys.get('previous') or [])} previous) · " if keys else "")
        + f"refreshes every {refresh_seconds} s · "
        'the same data as <a href="status">/status</a>'
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="{refresh_seconds}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>mcp-stdio-gateway</title><style>{STYLE}</style></head><body>"
        f'<h1>mcp-stdio-gateway</h1><p class="meta">{meta}</p>'
        + "".join(_server(s) for s in servers)
        + _errors(status.get("recent_errors") or [])
        + "</body></html>"
    )
