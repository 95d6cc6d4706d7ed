"""Composition root: settings → routers → ASGI app → uvicorn, with a graceful drain.

On the first SIGTERM or SIGINT: readiness fails at once and new MCP requests get 503
(``gateway.http.drain``); requests in flight get up to ``--drain-timeout`` to finish; the
rest are ended with a clear error; then uvicorn stops and the lifespan stops every child in
the spec's order (stdin close, SIGTERM, SIGKILL to its group). Exit code 0. A second signal
skips the wait.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from types import FrameType

import uvicorn
from starlette.applications import Starlette

from gateway import __version__, logs
from gateway.config import Settings
from gateway.http.app import create_app
from gateway.http.auth import TokenStore, trusted_networks
from gateway.http.drain import Drain
from gateway.router import Router
from gateway.stdio.process import become_subreaper
from gateway.tls import PeerSubjects, TlsFiles, uvicorn_options

log = logging.getLogger("gateway")


def build_app(settings: Settings, drain: Drain | None = None) -> Starlette:
    """The app for ``settings``; raises ``ConfigError`` for bad tokens, proxy addresses, OAuth
    settings or TLS files. ``app.state.tls`` and ``app.state.tls_peers`` are what ``run`` serves
    TLS with."""
    trusted_networks(settings.trusted_proxies)  # validated now, not when the first request builds the stack
    tls, peers = None, None
    if settings.tls_cert_file and settings.tls_key_file:
        tls = TlsFiles(settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file)
        peers = PeerSubjects() if settings.tls_client_ca_file else None
    routers = [Router(server, gateway_version=__version__) for server in settings.servers]
    app = create_app(
        routers,
        principal_header=settings.principal_header,
        trusted_proxies=settings.trusted_proxies,
        tokens=TokenStore(settings.auth_tokens, settings.auth_token_file),
        cors_origins=settings.cors_origins,
        authorization_servers=settings.oauth_authorization_servers,
        public_url=settings.public_url,
        max_body_bytes=settings.max_body_bytes,
        max_stream_seconds=settings.max_stream_seconds,
        max_requests_per_principal=settings.max_requests_per_principal,
        max_streams_per_principal=settings.max_streams_per_principal,
        loopback_only=settings.loopback_only,
        allowed_origins=settings.allowed_origins,
        allowed_hosts=settings.allowed_hosts,
        metrics=settings.metrics,
        drain=drain,
        state_secret=settings.state_secret(),
        tls_peers=peers,
    )
    app.state.tls = tls
    app.state.tls_peers = peers
    return app


class DrainingServer(uvicorn.Server):
    """uvicorn, but the first signal drains before the server stops."""

    def __init__(self, config: uvicorn.Config, drain: Drain, budget: float) -> None:
        super().__init__(config)
        self.drain = drain
        self.budget = budget
        self._signals = 0

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals > 1:  # impatient operator: stop now
            self.drain.cancel_rest()
            super().handle_exit(sig, frame)
            return
        log.info("received %s: draining (up to %.0f s)", signal.Signals(sig).name, self.budget)
        self.drain.begin()
        asyncio.get_running_loop().create_task(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        if await self.drain.wait_idle(self.budget):
            log.info("drained: every request finished")
        else:
            log.warning("drain budget spent with %d request(s) in flight; ending them", self.drain.in_flight)
            self.drain.cancel_rest()
        self.should_exit = True


def run(settings: Settings, app: Starlette | None = None) -> int:
    listener = logs.configure(settings.log_level, settings.log_format)
    become_subreaper()
    if settings.is_demo:
        log.info("no command given: serving the built-in demo server (tools: echo, countdown, fail, crash)")
    for server in settings.servers:
        log.info("server %s: %s", server.name, " ".join(server.spec.argv))
        if server.oauth is not None:
            audience = server.oauth.audience or "the endpoint's public URL"
            scopes = " ".join(server.oauth.scopes) or "none"
            log.info("server %s: OAuth access tokens from %s (audience: %s; scopes: %s)",
                     server.name, server.oauth.issuer, audience, scopes)  # fmt: skip
    if not settings.tls_cert_file and not settings.loopback_only:
        log.warning("plain HTTP on %s: bearer tokens cross the network in clear unless TLS is in front "
                    "(or give --tls-cert-file and --tls-key-file)", settings.host)  # fmt: skip
    if settings.tls_cert_file:
        mutual = f"; client certificates from {settings.tls_client_ca_file}" if settings.tls_client_ca_file else ""
        log.info("TLS: %s, reloaded when it changes%s", settings.tls_cert_file, mutual)
    path = "/mcp" if len(settings.servers) == 1 else "/servers/NAME/mcp"
    log.info("MCP endpoint: %s://%s:%d%s", settings.scheme, settings.host, settings.port, path)
    app = app if app is not None else build_app(settings)
    drain: Drain = app.state.drain
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        lifespan="on",
        log_config=None,  # ours (gateway.logs), so JSON logging covers uvicorn too
        # The client address is the TCP peer: X-Forwarded-For is not trusted, or a client could
        # pose as a --trusted-proxy (identity headers are checked against this address).
        proxy_headers=False,
        timeout_graceful_shutdown=5,
        **uvicorn_options(getattr(app.state, "tls", None), getattr(app.state, "tls_peers", None)),
    )
    try:
        DrainingServer(config, drain, settings.drain_timeout).run()
    finally:
        listener.stop()
    return 0
