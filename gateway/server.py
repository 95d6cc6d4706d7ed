"""Composition root: settings → routers → ASGI app → uvicorn, with a graceful drain.

The listening socket is bound first, before any child is spawned or anything is logged: a
port already in use ends the process with exit code 2 and one line naming ``--port``.
Then every endpoint URL is logged (and, for the demo, a ``call`` line to try).

On the first SIGTERM or SIGINT: readiness fails at once and new MCP requests get 503
(``gateway.http.drain``); requests in flight get up to ``--drain-timeout`` to finish; the
rest are ended with a clear error; then uvicorn stops and the lifespan stops every child in
the spec's order (stdin close, SIGTERM, SIGKILL to its group); last, any process a child
started that is still running below the gateway (it left its group with ``setsid()``) is
ended too (``process.sweep_descendants``). Exit code 0. A second signal skips the wait.

The service failing after start-up (an exception no inner failure domain contained, which
ended the app's lifespan) stops uvicorn at once and the process exits with
``EXIT_SERVICE_FAILED``: uvicorn alone would go on answering 503 to every MCP request, and a
supervisor (the ``--workers`` one, Kubernetes, systemd) replaces a process that exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import logging
import os
import shlex
import signal
import socket
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Final

import anyio
import uvicorn
from starlette.applications import Starlette

from gateway import __version__
from gateway.config import Settings, flag_of
from gateway.errors import ConfigError
from gateway.http.app import create_app
from gateway.http.auth import TokenStore, trusted_networks
from gateway.http.connection import GuardedHttpTools
from gateway.http.drain import Drain
from gateway.http.edge_settings import OPS_MAX_CONNECTIONS
from gateway.http.lanes import Serving
from gateway.http.limits import OpenConnections
from gateway.http.tls import PeerSubjects, TlsFiles, uvicorn_options
from gateway.ops import logs
from gateway.ops.tracing import open_tracer
from gateway.relay.owner import OwnerRouting
from gateway.relay.router import Router
from gateway.relay.statekeys import StateKeys
from gateway.stdio.backend import PROCESS_BACKEND, ChildBackend
from gateway.stdio.budget import ChildBudget
from gateway.stdio.confinement import describe, make_undumpable
from gateway.stdio.process import become_subreaper, hold_late_signals, sweep_descendants

log = logging.getLogger("gateway")

LISTEN_BACKLOG: Final = 2048
"""Connections the kernel queues before uvicorn accepts them (uvicorn's own default)."""
EXIT_SERVICE_FAILED: Final = 1
"""The exit code when the service failed after start-up (uvicorn's start-up failure is 3)."""
YOUNG_GC_THRESHOLD: Final = 10_000
"""Container objects allocated (net of those freed) before the cyclic collector looks at the
young generation; CPython's default is 700. Under load every call in flight holds a hundred
or more such objects that die by reference count when its answer is written: at 64 calls in
flight the default ran a young collection about every 16 calls, and each found nothing
(issue #42: 14 µs of CPU per call, 0 objects collected in 12,800 calls). At 10,000 the
young collection runs when that much is really kept; garbage cycles (a cancelled call's
traceback, say) wait at most that long, a few MB at worst."""
OPS_FLAG: Final = flag_of("ops_listen")
OPS_SHUTDOWN_GRACE: Final = 2
"""Seconds a scrape or probe in progress on the ops listener gets to finish when the gateway
has stopped (its answers are small; the main listener has drained long before)."""


def listen_socket(host: str, port: int, flag: str | None = None) -> socket.socket:
    """The bound, listening socket uvicorn will serve on; ``ConfigError`` naming the flag
    to change when it cannot be had (checked before any child is spawned): ``--port`` and
    ``--host``, or ``flag`` (``--ops-listen``) for both."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only then.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        where = f"{host}:{port}"
        port_flag, host_flag = (flag, flag) if flag else ("--port", "--host")
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(port_flag, f"{where} is already in use; choose another port with {port_flag}") from exc
        if exc.errno == errno.EACCES:
            raise ConfigError(
                port_flag, f"not allowed to listen on {where}; choose a port above 1023 with {port_flag}"
            ) from exc
        raise ConfigError(host_flag, f"cannot listen on {where}: {exc.strerror or exc}; check {host_flag}") from exc
    return sock


def base_url(settings: Settings, port: int) -> str:
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    return f"{settings.scheme}://{host}:{port}"


def ops_urls(settings: Settings, sock: socket.socket) -> list[str]:
    """What the ops listener on ``sock`` serves, as URLs (plain HTTP, TLS or not)."""
    host, port = sock.getsockname()[:2]
    base = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    return [base + path for path in ("/healthz", "/readyz", *(["/metrics"] if settings.metrics else []))]


def endpoint_urls(settings: Settings, port: int) -> list[str]:
    """Every MCP endpoint the gateway serves, as URLs (a single server also at ``/mcp``)."""
    base = base_url(settings, port)
    urls = [f"{base}/servers/{server.name}/mcp" for server in settings.servers]
    return [f"{base}/mcp", *urls] if len(settings.servers) == 1 else urls


def operations_urls(settings: Settings, port: int) -> list[str]:
    """The pages beside the MCP endpoints: live status, its JSON, the Prometheus page
    (unless ``--no-metrics``) and the probes."""
    base = base_url(settings, port)
    paths = ["/ui", "/status", *(["/metrics"] if settings.metrics else []), "/healthz", "/readyz"]
    return [base + path for path in paths]


def build_app(
    settings: Settings,
    drain: Drain | None = None,
    owner_routing: OwnerRouting | None = None,
    backend: ChildBackend = PROCESS_BACKEND,
) -> Starlette:
    """The app for ``settings``; raises ``ConfigError`` for bad tokens, proxy addresses, OAuth
    settings or TLS files. ``app.state.tls`` and ``app.state.tls_peers`` are what ``run`` serves
    TLS with. With ``--advertise-url`` (or ``owner_routing``, for a worker) it routes to owners.
    ``backend`` starts every server's children (real processes; the component tests pass a fake)."""
    trusted_networks(settings.trusted_proxies)  # validated now, not when the first request builds the stack
    tls, peers = None, None
    if settings.tls_cert_file and settings.tls_key_file:
        tls = TlsFiles(settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file)
        peers = PeerSubjects() if settings.tls_client_ca_file else None
    advertise_url = settings.own_advertise_url()
    state_keys = owner_routing.keys if owner_routing is not None else settings.state_keys()
    if owner_routing is None and advertise_url is not None:
        assert state_keys is not None  # Settings requires --state-secret-file with --advertise-url
        owner_routing = OwnerRouting(advertise_url, state_keys, max_body_bytes=settings.max_body_bytes)
    children = ChildBudget(settings.max_children)  # one cap over every server's pools
    # None when off (nothing of OpenTelemetry imported); ConfigError when asked for without the extra.
    tracer = open_tracer(settings.tracing, os.environ, __version__)
    hidden = settings.secret_files  # unreadable to every child (gateway.stdio.confinement)
    routers = [
        Router(
            replace(server, spec=replace(server.spec, hidden_files=hidden)),
            gateway_version=__version__,
            children=children,
            backend=backend,
        )
        for server in settings.servers
    ]
    app = create_app(
        routers,
        settings.edge(),
        tokens=TokenStore(settings.auth_tokens, settings.auth_token_file),
        drain=drain,
        state_keys=state_keys,
        tls_peers=peers,
        owner_routing=owner_routing,
        operator_tokens=TokenStore(settings.operator_tokens, settings.operator_token_file, flag="--operator-token"),
        operator_scope=settings.operator_scope,
        tracer=tracer,
    )
    app.state.tls = tls
    app.state.tls_peers = peers
    return app


class OpsServer(uvicorn.Server):  # fenced: uvicorn.Server
    """The ops listener (``--ops-listen``): a second uvicorn server in the same event loop,
    serving ``gateway.http.routes.ops_app`` (``/healthz``, ``/readyz``, ``/metrics``) on its own
    sockets, over plain HTTP whatever TLS the main listener has (a kubelet or a scraper holds
    no client certificate). It never takes the process's signals: the main server handles them
    (``capture_signals`` does nothing here), and ``DrainingServer.serve`` runs this one beside
    itself and stops it when it has stopped."""

    @classmethod
    def over(cls, app: Starlette, sockets: Sequence[socket.socket], log_level: str) -> OpsServer:
        config = uvicorn.Config(
            app,
            log_level=log_level,
            lifespan="off",  # the main server's lifespan opens what these pages read
            # The same head size and time bounds as the main listener; its own connection cap.
            http=GuardedHttpTools.configured(connections=OpenConnections(OPS_MAX_CONNECTIONS, "the ops listener")),
            log_config=None,
            access_log=False,
            proxy_headers=False,
            server_header=False,
            timeout_graceful_shutdown=OPS_SHUTDOWN_GRACE,
        )
        server = cls(config)
        server.ops_sockets = list(sockets)
        return server

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ops_sockets: list[socket.socket] = []

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the main server's handle_exit keeps the signals (it drains, then stops this one)


class DrainingServer(uvicorn.Server):  # fenced: uvicorn.Server
    """uvicorn, but the first signal drains before the server stops, and the service failing
    (``serving``) stops it at once (``failed``). Both watches run in a task group beside
    uvicorn's main loop (``main_loop``), so they have an owner and end with it. The ops
    listener (``ops``), when there is one, runs beside the whole server (``serve``): it answers
    while the app starts and while it stops, and is stopped once the server has."""

    def __init__(
        self,
        config: uvicorn.Config,
        drain: Drain,
        budget: float,
        serving: Serving | None = None,
        ops: OpsServer | None = None,
    ) -> None:
        super().__init__(config)
        self.drain = drain
        self.budget = budget
        self.serving = serving
        self.ops = ops
        self.failed = False  # the service failed after start-up: the process exits non-zero
        self._signals = 0
        self._signalled: anyio.Event | None = None  # made in the event loop (main_loop)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """uvicorn installs this with ``signal.signal``: it runs between any two bytecodes of
        whatever the loop was doing. So it only schedules ``_on_signal`` on the running loop
        (as ``loop.add_signal_handler`` would); the drain and a second signal's cancels then
        run as a callback of their own, never inside a step of an answer's machine."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop runs (before uvicorn's serve, or after it)
            self._on_signal(sig, frame)
            return
        loop.call_soon_threadsafe(self._on_signal, sig, frame)

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals > 1:  # impatient operator: stop now
            log.info("received %s: stopping now", signal.Signals(sig).name)
            self.drain.cancel_rest()
            # Not uvicorn's ``handle_exit``: it records the signal and raises it again once it
            # has put back the default handlers, which ended the process by SIGTERM (exit status
            # -15, before the sweep of orphans) or with a KeyboardInterrupt instead of exit code
            # 0; and on a later SIGINT it sets ``force_exit``, which skips the app's lifespan
            # shutdown, where every child is stopped in its spec's order and reaped.
            self.should_exit = True
            return
        log.info("received %s: draining (up to %.0f s)", signal.Signals(sig).name, self.budget)
        self.drain.begin()
        if self._signalled is not None:  # else main_loop has not begun yet: it sees _signals
            self._signalled.set()

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        ops = self.ops
        if ops is None:
            await super().serve(sockets)
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(ops.serve, ops.ops_sockets)
            try:
                await super().serve(sockets)
            finally:
                ops.should_exit = True  # its main loop sees it within a tick; its shutdown is awaited here

    async def main_loop(self) -> None:
        self._signalled = anyio.Event()
        if self._signals:  # a signal came while the app started
            self._signalled.set()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._drain_then_exit, self._signalled)
            if self.serving is not None:
                tg.start_soon(self._exit_when_failed, self.serving)
            await super().main_loop()  # until should_exit: the drain's end, or a second signal
            tg.cancel_scope.cancel()

    async def _drain_then_exit(self, signalled: anyio.Event) -> None:
        await signalled.wait()
        if await self.drain.wait_idle(self.budget):
            log.info("drained: every request finished")  # and every parked call and task the drain waited for
        else:
            drain = self.drain
            log.warning(
                "drain budget spent with %d request(s) in flight and %d parked call(s) or task(s) held; ending them",
                drain.in_flight - drain.held,
                drain.held,
            )
            self.drain.cancel_rest()
        self.should_exit = True

    async def _exit_when_failed(self, serving: Serving) -> None:
        failure = await serving.wait_failed()
        log.critical("stopping: the service failed (%r); exit code %d", failure, EXIT_SERVICE_FAILED)
        self.failed = True
        self.should_exit = True


def _refused(exc: ConfigError) -> int:
    print(f"mcp-stdio-gateway: {exc.message}", file=sys.stderr)
    return 2


PLACEHOLDER_MARK: Final = "change-me"
"""What the shipped demo tokens, operator token and state secret contain (``deploy/compose/``): a secret with it
in is one that everyone who has this repository knows."""


def _placeholder_lines(path: str | None) -> int:
    """Lines of the file at ``path`` holding ``PLACEHOLDER_MARK`` (0: none, or unreadable: the
    file's own check reports that)."""
    if path is None:
        return 0
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return 0
    return sum(PLACEHOLDER_MARK in line.lower() for line in text.splitlines())


def _placeholders(path: str | None, tokens: Sequence[str]) -> int:
    """Tokens holding ``PLACEHOLDER_MARK``: in the file at ``path`` and given on the command line."""
    return _placeholder_lines(path) + sum(PLACEHOLDER_MARK in token.lower() for token in tokens)


def exposure_warnings(settings: Settings) -> list[str]:
    """What start-up warns about: credentials that travel in clear, and the shipped placeholder
    secrets still in use.

    Plain HTTP is worth a warning only when a credential crosses it: a bearer token the gateway
    checks (tokens, or OAuth access tokens). Behind an authenticating proxy that drops the token
    and sends a principal header (the compose nginx), no credential reaches the gateway, and
    nothing is said."""
    warnings = []
    checks_bearer = bool(settings.auth_tokens or settings.auth_token_file) or any(
        server.oauth is not None for server in settings.servers
    )
    if checks_bearer and not settings.tls_cert_file and not settings.loopback_only:
        warnings.append(
            f"plain HTTP on {settings.host}: bearer tokens cross the network in clear unless TLS is in "
            "front (or give --tls-cert-file and --tls-key-file)"
        )
    placeholder_tokens = _placeholders(settings.auth_token_file, settings.auth_tokens)
    if placeholder_tokens:
        warnings.append(
            f"DEMO TOKENS IN USE: {placeholder_tokens} bearer token(s) contain {PLACEHOLDER_MARK!r}: anyone "
            "with this project's files can use them; replace them with random ones"
        )
    placeholder_operators = _placeholders(settings.operator_token_file, settings.operator_tokens)
    if placeholder_operators:
        warnings.append(
            f"PLACEHOLDER OPERATOR TOKEN IN USE: {placeholder_operators} operator token(s) contain "
            f"{PLACEHOLDER_MARK!r}: anyone with this project's files can read /status and /ui (every "
            "command line and stderr tail); replace it (python3 -c 'import secrets; print(secrets.token_hex(32))')"
        )
    if _placeholder_lines(settings.state_secret_file):
        warnings.append(
            f"PLACEHOLDER STATE SECRET IN USE: {settings.state_secret_file} contains {PLACEHOLDER_MARK!r}: anyone "
            "with this project's files can forge session ids, requestState tokens and forwarded requests; "
            "replace it (python3 -c 'import secrets; print(secrets.token_hex(32))')"
        )
    return warnings


def confine_from_children(settings: Settings) -> None:
    """Keep this process's environment and memory from its children (not dumpable) and say at
    start what children cannot read; a warning when a secret file is not protected here."""
    line, warn = describe(settings.secret_files, make_undumpable())
    log.log(logging.WARNING if warn else logging.INFO, "%s", line)


def run(settings: Settings, app: Starlette | None = None) -> int:
    try:
        sock = listen_socket(settings.host, settings.port)
    except ConfigError as exc:
        return _refused(exc)
    ops_sockets: list[socket.socket] = []
    if settings.ops_address is not None:
        try:
            ops_sockets.append(listen_socket(*settings.ops_address, flag=OPS_FLAG))
        except ConfigError as exc:
            sock.close()
            return _refused(exc)
    listener = logs.configure(settings.log_level, settings.log_format)
    if settings.is_demo:
        log.info("no command given: serving the built-in demo server (tools: echo, countdown, fail, crash)")
    for server in settings.servers:
        log.info("server %s: %s", server.name, " ".join(server.spec.argv))
        if server.oauth is not None:
            audience = server.oauth.audience or "the endpoint's public URL"
            scopes = " ".join(server.oauth.scopes) or "none"
            log.info("server %s: OAuth access tokens from %s (audience: %s; scopes: %s)",
                     server.name, server.oauth.issuer, audience, scopes)  # fmt: skip
    for warning in exposure_warnings(settings):
        log.warning("%s", warning)
    confine_from_children(settings)
    if settings.tls_cert_file:
        mutual = f"; client certificates from {settings.tls_client_ca_file}" if settings.tls_client_ca_file else ""
        log.info("TLS: %s, reloaded when it changes%s", settings.tls_cert_file, mutual)
    port = sock.getsockname()[1]
    # uvicorn says "running on" only for sockets it binds itself; this one is bound already.
    log.info("running on %s://%s:%d (press Ctrl-C to stop)", settings.scheme, settings.host, port)
    urls = endpoint_urls(settings, port)
    for url in urls:
        log.info("MCP endpoint: %s", url)
    log.info("operations: %s", " ".join(operations_urls(settings, port)))
    for ops in ops_sockets:
        log.info("ops listener: %s", " ".join(ops_urls(settings, ops)))
    if settings.is_demo:
        # A self-signed certificate is trusted by nobody yet: the try line names it for call.
        cacert = f" --cacert {shlex.quote(settings.tls_cert_file)}" if settings.tls_cert_file else ""
        log.info("try: mcp-stdio-gateway call %s echo --arg message=hello%s", urls[0], cacert)
    if settings.advertise_url is not None:
        log.info("owner routing: other instances reach this one at %s", settings.own_advertise_url())
    if settings.workers > 1:
        from gateway import workers  # imported late: only --workers needs multiprocessing

        try:
            return workers.supervise(settings, sock, worker_main, ops_sockets)
        finally:
            sock.close()
            for ops in ops_sockets:
                ops.close()
            listener.stop()
    # Not in a --workers supervisor: it waits for its workers only, so each worker adopts its
    # own orphans, and a dead worker's go to init (or the container's tini).
    become_subreaper()
    try:
        return serve(settings, app if app is not None else build_app(settings), [sock], ops_sockets)
    finally:
        sock.close()
        for ops in ops_sockets:
            ops.close()
        listener.stop()


def settle_heap() -> None:
    """Before serving: what exists now (the modules, the settings, the app, nothing of any
    client or child) lives as long as the process, so the cyclic collector stops visiting it
    (``gc.freeze``); and the young generation is collected at ``YOUNG_GC_THRESHOLD``.

    Without the freeze, every full collection walked the ~60,000 objects of the imported
    modules (about 60 ms each on a 2-core machine, seven in 12,800 calls at 64 in flight:
    21 µs of CPU per call, finding nothing). Only start-up's own objects are frozen: the
    children and pools start after this (the app's lifespan), so whatever they leave in
    cycles is still collected."""
    gc.collect()  # what start-up left in cycles goes now, not into the frozen heap
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GC_THRESHOLD, middle, old)


def serve(
    settings: Settings, app: Starlette, sockets: list[socket.socket], ops_sockets: Sequence[socket.socket] = ()
) -> int:
    """uvicorn on ``sockets`` (bound already) until a signal has drained it (0) or the service
    failed (``EXIT_SERVICE_FAILED``): the process's exit code. ``ops_sockets``: the ops
    listener's (``--ops-listen``), served the app's ``ops_app`` beside it (``OpsServer``).
    The heap is settled first (``settle_heap``)."""
    drain: Drain = app.state.drain
    ops = OpsServer.over(app.state.ops_app, ops_sockets, settings.log_level) if ops_sockets else None
    # TLS (and, under mutual TLS, a protocol that records client certificates) when configured.
    # Over the listener's connection count and cap (--max-connections; create_app made it).
    http = GuardedHttpTools.configured(connections=app.state.connections)
    options = uvicorn_options(getattr(app.state, "tls", None), getattr(app.state, "tls_peers", None), http)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        lifespan="on",
        # httptools, with the head size, head time and write time bounded on the socket.
        http=options.pop("http", GuardedHttpTools),
        log_config=None,  # ours (gateway.ops.logs), so JSON logging covers uvicorn too
        # gateway.access is the access log. uvicorn's own is off (not merely muted): otherwise it
        # still formats each response's client address and quoted path before finding no handler.
        access_log=False,
        # The client address is the TCP peer: X-Forwarded-For is not trusted, or a client could
        # pose as a --trusted-proxy (identity headers are checked against this address).
        proxy_headers=False,
        # No "server: uvicorn" on every answer: it tells a prober the software, and costs a
        # header per response for nothing a client uses.
        server_header=False,
        timeout_graceful_shutdown=5,
        **options,
    )
    server = DrainingServer(config, drain, settings.drain_timeout, getattr(app.state, "serving", None), ops)
    settle_heap()
    # uvicorn installs ``handle_exit`` while it runs and then puts back the handlers it found:
    # these, so that a signal after it (before ``hold_late_signals``) is noted, not the default
    # action, which would end the process by that signal before the sweep below.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, server.handle_exit)
    try:
        server.run(sockets=sockets)
    finally:
        hold_late_signals()
        # Every child has stopped; what they started outside their process group (setsid)
        # was re-parented to us (the subreaper) and must not outlive the gateway.
        sweep_descendants()
    return EXIT_SERVICE_FAILED if server.failed else 0


def worker_main(
    settings: Settings,
    sock: socket.socket,
    secret: bytes | None,
    index: int,
    count: int,
    ops_sockets: Sequence[socket.socket] = (),
) -> None:
    """One ``--workers`` worker: the shared socket (and the ops listener's, shared too), its own
    loopback port (its advertise URL), its own pools. Started by ``workers.supervise`` in a
    fresh interpreter. ``secret``: the supervisor's random key the workers share, or None:
    each worker reads (and re-reads) ``--state-secret-file`` itself."""
    from gateway import workers

    listener = workers.enter_worker(settings, index + 1)
    make_undumpable()  # a fresh interpreter: dumpable again (its supervisor logged what holds)
    own = listen_socket("127.0.0.1", 0)
    url = f"http://127.0.0.1:{own.getsockname()[1]}"
    keys = StateKeys.fixed(secret) if secret is not None else settings.state_keys()
    assert keys is not None  # a secret, or the file (the supervisor read it before starting any worker)
    routing = OwnerRouting(url, keys, max_body_bytes=settings.max_body_bytes, label=f"worker {index + 1} of {count}")
    workers.log.info("worker %d of %d: serving, other workers reach it at %s", index + 1, count, url)
    try:
        code = serve(settings, build_app(settings, owner_routing=routing), [sock, own], ops_sockets)
    finally:
        own.close()
        listener.stop()
    if code:
        sys.exit(code)  # the supervisor starts the worker again
