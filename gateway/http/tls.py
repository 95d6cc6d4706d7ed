"""TLS termination: a certificate that is reloaded when its files change, and client certificates.

``TlsFiles`` builds the ``ssl.SSLContext`` uvicorn serves with (TLS 1.2 or newer, ALPN
``http/1.1``). At every ClientHello its ``sni_callback`` looks at the files (``os.stat`` of
two or three files: nothing next to the handshake's own cost). When one changed — cert-manager
renewed the Secret, an operator replaced the pair — a fresh context is built from them and
this handshake and every later one use it; connections already open keep theirs. A pair that
does not load (a rotation caught half-written: the new certificate with the old key) is
logged once and the last good pair stays in use until the files change again.

With ``--tls-client-ca-file`` every client must present a certificate that CA signed
(mutual TLS), and ``PeerSubjects`` remembers each connection's certificate subject (RFC 4514,
e.g. ``CN=alice,O=Example``) by its peer address, the same (host, port) the ASGI scope
carries as ``client``; ``Authentication`` (``gateway.http.auth``) makes it the principal. uvicorn puts no TLS details in
the scope, so the HTTP protocol class is subclassed (``peer_protocol``) to see the transport
when the connection is made and lost — only asyncio's public ``Protocol`` methods.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Callable
from typing import Any

from cryptography import x509
from uvicorn.protocols.utils import get_remote_addr

from gateway.errors import ConfigError
from gateway.http.connection import GuardedHttpTools

log = logging.getLogger("gateway.http.tls")

Signature = tuple[tuple[int, int, int], ...]


class TlsFiles:
    def __init__(self, cert_file: str, key_file: str, client_ca_file: str | None = None) -> None:
        self.files = tuple(f for f in (cert_file, key_file, client_ca_file) if f is not None)
        self.cert_file, self.key_file, self.client_ca_file = cert_file, key_file, client_ca_file
        self.reloads = 0  # certificate pairs loaded after the first (tests and logs)
        try:
            self._signature = self._stat()
            self.context = self._build()  # the one uvicorn holds; later ones replace it per handshake
        except OSError as exc:
            raise ConfigError("--tls-cert-file", f"cannot load {cert_file} with {key_file}: {_reason(exc)}") from exc
        self._current = self.context
        self._failed: Signature | None = None
        self.context.sni_callback = self._on_client_hello

    def _stat(self) -> Signature:
        out = []
        for path in self.files:
            st = os.stat(path)  # follows symlinks: Kubernetes swaps a ..data link on update
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(out)

    def _build(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file is not None:
            context.load_verify_locations(cafile=self.client_ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def reload_if_changed(self) -> ssl.SSLContext:
        """The context for a new handshake, rebuilt first when a file changed."""
        try:
            signature = self._stat()
        except OSError as exc:
            if self._failed is None:
                log.error("cannot read the TLS files (%s); serving the certificate loaded before", _reason(exc))
                self._failed = ()
            return self._current
        if signature == self._signature or signature == self._failed:
            return self._current
        try:
            context = self._build()
        except OSError as exc:  # ssl.SSLError is one
            log.error("the TLS files changed but do not load (%s); serving the certificate loaded before", _reason(exc))
            self._failed = signature
            return self._current
        self._current, self._signature, self._failed = context, signature, None
        self.reloads += 1
        log.info("reloaded the TLS certificate from %s", self.cert_file)
        return context

    def _on_client_hello(self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: Any) -> None:
        try:
            context = self.reload_if_changed()
            if context is not self.context:
                connection.context = context
        except Exception:  # an exception here would fail the handshake: serve what we have
            log.exception("TLS certificate reload failed")


def _reason(exc: OSError) -> str:
    return str(exc) if isinstance(exc, ssl.SSLError) else exc.strerror or str(exc)


class PeerSubjects:
    """The client-certificate subject of each open TLS connection, by peer (host, port)."""

    def __init__(self) -> None:
        self._by_peer: dict[tuple[str, int], str] = {}

    def connected(self, transport: asyncio.BaseTransport) -> tuple[str, int] | None:
        ssl_object = transport.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        peer = get_remote_addr(transport)  # type: ignore[arg-type]  # uvicorn computes scope["client"] so
        if der is None or peer is None:
            return None
        try:
            subject = x509.load_der_x509_certificate(der).subject.rfc4514_string()
        except ValueError:  # verified by the CA yet unreadable here: no principal, not a dead connection
            log.warning("cannot read the subject of %s's client certificate", peer[0])
            return None
        self._by_peer[peer] = subject
        return peer

    def disconnected(self, peer: tuple[str, int] | None) -> None:
        if peer is not None:
            self._by_peer.pop(peer, None)

    def subject_for(self, client: Any) -> str | None:
        if not client:
            return None
        return self._by_peer.get((str(client[0]), int(client[1])))

    def __len__(self) -> int:
        return len(self._by_peer)


def peer_protocol(peers: PeerSubjects, base: type[asyncio.Protocol] = GuardedHttpTools) -> type[asyncio.Protocol]:
    """The gateway's HTTP protocol (head, body and write limits kept), telling ``peers`` when a
    TLS connection is made and lost."""

    class PeerProtocol(base):  # type: ignore[valid-type,misc]
        _peer: tuple[str, int] | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self._peer = peers.connected(transport)
            super().connection_made(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            peers.disconnected(self._peer)
            super().connection_lost(exc)

    return PeerProtocol


def uvicorn_options(tls: TlsFiles | None, peers: PeerSubjects | None) -> dict[str, Any]:
    """The ``uvicorn.Config`` arguments that serve TLS from ``tls`` (nothing without it)."""
    if tls is None:
        return {}
    factory: Callable[[Any, Any], ssl.SSLContext] = lambda config, default: tls.context  # noqa: E731
    options: dict[str, Any] = {"ssl_context_factory": factory}
    if peers is not None:
        options["http"] = peer_protocol(peers)
    return options
