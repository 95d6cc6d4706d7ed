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

The handshake is the gateway's, not uvicorn's: uvicorn serves plain TCP, and ``TlsHandshake``
upgrades each connection with asyncio's public ``loop.start_tls`` (uvloop has the same), so the
handshake is bounded by the head timeout (``GuardedHttpTools.header_timeout``, counted from the
accept: handshake and first request head together) instead of asyncio's 60 s default, and a TLS
closing handshake (a refusal, an idle keep-alive connection) waits at most as long for the
peer's ``close_notify``. Then the HTTP protocol runs on the TLS transport with every limit it
has over plain TCP.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from typing import Any, ClassVar, cast

from cryptography import x509
from uvicorn.protocols.utils import get_remote_addr

from gateway.errors import ConfigError
from gateway.http.connection import PAST_CAP_HEAD_TIMEOUT, GuardedHttpTools

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


def peer_protocol(peers: PeerSubjects, base: type[GuardedHttpTools] = GuardedHttpTools) -> type[GuardedHttpTools]:
    """The gateway's HTTP protocol (head, body and write limits kept), telling ``peers`` when a
    TLS connection is made and lost."""

    class PeerProtocol(base):  # type: ignore[valid-type,misc]
        # Not ``_peer``: a name of the base class (its log label) must not be shadowed here, or
        # every refusal it makes raises instead (issue #24 item 3).
        _subject_peer: tuple[str, int] | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self._subject_peer = peers.connected(transport)
            super().connection_made(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            peers.disconnected(self._subject_peer)
            super().connection_lost(exc)

    return PeerProtocol


class TlsHandshake(asyncio.Protocol):
    """A TLS connection until its handshake is done, then ``http`` on the TLS transport.

    uvicorn builds one per accepted connection (its ``http`` option takes a class, called with
    its keyword arguments, which go to ``http``); ``tls_protocol`` makes the class.

    Two moments need care, both tested on asyncio's loop and on uvloop:

    - before ``start_tls`` takes the TCP transport over: asyncio honours the ``pause_reading``
      of ``connection_made``, but uvloop starts reading after it, so the first bytes of the
      ClientHello may come here. They are kept and handed to the TLS protocol ahead of
      everything else, before its handshake starts (``_replay``);
    - between the handshake's end and the hand-over to ``http`` (``set_protocol``): this is
      the TLS transport's protocol then, and bytes that arrive (a client sends its request
      with the handshake's last flight) are kept and given to ``http`` after its
      ``connection_made``."""

    http: ClassVar[type[GuardedHttpTools]] = GuardedHttpTools
    tls: ClassVar[TlsFiles]

    def __init__(self, **uvicorn_arguments: Any) -> None:
        self._http = self.http(**uvicorn_arguments)  # made now: its head deadline starts at the accept
        # What the handshake holds of the listener's count (``OpenConnections``): True, a
        # slot; False, a slot past the cap (the request is answered 503 after it); None: none.
        self._counted: bool | None = None
        self._handshake: asyncio.Task[None] | None = None
        self._tcp: asyncio.Transport | None = None
        self._ciphertext: list[bytes] = []  # read before start_tls took the transport over
        self._plaintext: list[bytes] = []  # decrypted before http took the TLS transport over
        self._lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A TCP transport: asyncio's, or uvloop's (which does not subclass asyncio.Transport).
        tcp = self._tcp = cast(asyncio.Transport, transport)
        # A handshake holds a descriptor too: counted from the accept, as a plain connection is.
        self._counted = self.http.open_connections.admit()
        if self._counted is None:  # past the cap and those waiting for their 503: closed at once
            tcp.abort()
            return
        tcp.pause_reading()  # until start_tls takes the transport over (asyncio; uvloop reads on)
        self._handshake = asyncio.get_running_loop().create_task(self._upgrade(tcp))

    def data_received(self, data: bytes) -> None:
        if self._tcp is not None:
            self._ciphertext.append(data)
            self._tcp.pause_reading()
        else:
            self._plaintext.append(data)

    def eof_received(self) -> None:
        return None  # close: no request came

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._uncount()
        if self._handshake is not None and not self._handshake.done():
            self._handshake.cancel()

    def _uncount(self) -> None:
        """Give back what the handshake holds of the count (once: at the hand-over to ``http``,
        which counts itself, or when the handshake ends otherwise)."""
        counted, self._counted = self._counted, None
        if counted is not None:
            self.http.open_connections.release(counted)

    async def _upgrade(self, tcp: asyncio.Transport) -> None:
        http = self._http
        loop = asyncio.get_running_loop()
        remaining = max(http.head_deadline - loop.time(), 0.001)
        if self._counted is False:  # past the cap: the handshake gets a refused head's time
            remaining = min(remaining, PAST_CAP_HEAD_TIMEOUT)
        if self._ciphertext:
            # Runs before the callbacks start_tls schedules (the TLS protocol's connection_made,
            # then resume_reading): the TLS protocol finds these bytes first.
            loop.call_soon(_replay, tcp, b"".join(self._ciphertext))
            self._ciphertext = []
        self._tcp = None  # from here on, what arrives here is the TLS transport's plaintext
        try:
            try:
                secured = await loop.start_tls(  # fenced: loop.start_tls
                    tcp,
                    self,
                    self.tls.context,
                    server_side=True,
                    ssl_handshake_timeout=remaining,
                    ssl_shutdown_timeout=http.header_timeout,
                )
            except OSError as exc:  # ssl.SSLError, the handshake timeout, a reset: the connection is closed
                log.debug("TLS handshake with %s not completed: %s", tcp.get_extra_info("peername"), exc)
                tcp.abort()
                return
            if secured is None or self._lost or secured.is_closing():  # closed as the handshake ended
                return
            secured.set_protocol(http)
        finally:
            # Given back however the handshake ended (a failure, a cancel, the hand-over):
            # ``http`` counts the connection from here (past the cap: its 503).
            self._uncount()
        http.connection_made(secured)  # the TLS transport
        if self._plaintext:
            early, self._plaintext = b"".join(self._plaintext), []
            http.data_received(early)


def _replay(tcp: asyncio.Transport, ciphertext: bytes) -> None:  # fenced: loop.start_tls
    """Give ``ciphertext`` to the TLS protocol ``start_tls`` put on ``tcp`` (a buffered protocol,
    in asyncio and in uvloop), as if the transport had just read it."""
    protocol = tcp.get_protocol()
    if not isinstance(protocol, asyncio.BufferedProtocol) and not hasattr(protocol, "get_buffer"):
        cast(asyncio.Protocol, protocol).data_received(ciphertext)
        return
    buffered = cast(asyncio.BufferedProtocol, protocol)
    view = memoryview(ciphertext)
    while view:
        buffer = memoryview(buffered.get_buffer(len(view)))
        size = min(len(buffer), len(view))
        buffer[:size] = view[:size]
        buffered.buffer_updated(size)
        view = view[size:]


def tls_protocol(tls: TlsFiles, http: type[GuardedHttpTools] = GuardedHttpTools) -> type[TlsHandshake]:
    """uvicorn's ``http`` class for a TLS listener: the handshake from ``tls``, then ``http``."""
    return type("TlsHandshake", (TlsHandshake,), {"http": http, "tls": tls})


def uvicorn_options(
    tls: TlsFiles | None, peers: PeerSubjects | None, http: type[GuardedHttpTools] = GuardedHttpTools
) -> dict[str, Any]:
    """The ``uvicorn.Config`` arguments that serve ``http`` (the gateway's protocol class, with its
    limits) over TLS from ``tls``, or over plain TCP without it. uvicorn is not told about TLS:
    the handshake is ``TlsHandshake``'s, so the head timeout bounds it."""
    if tls is None:
        return {"http": http}
    return {"http": tls_protocol(tls, peer_protocol(peers, http) if peers is not None else http)}
