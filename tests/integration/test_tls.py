"""TLS termination against a real gateway: certificates minted here with ``cryptography``.

The gateway is composed as ``mcp-stdio-gateway --tls-cert-file … --tls-key-file …`` composes
it (``server.build_app`` and ``tls.uvicorn_options``) and served on a loopback port.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shlex
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from anyio.streams.tls import TLSAttribute
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.config import Settings
from gateway.errors import ConfigError
from gateway.http.tls import TlsFiles, uvicorn_options
from gateway.relay.server_config import Isolation, ServerConfig
from gateway.server import build_app
from tests.conftest import server_spec
from tests.gateway_server import OPERATOR, OPERATOR_TOKEN, modern_call, modern_headers, serving

pytestmark = pytest.mark.anyio

TEST_BOUND = 55.0
"""Every test's whole run (pytest-timeout's backstop is 60 s)."""
HTTP_TIMEOUT = TEST_BOUND
"""Per request: only the test's bound. A child's first start on a busy machine can take tens
of seconds, and a shorter per-request timeout would fail a test that is merely slow."""


CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=False,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=True,
    crl_sign=True,
    encipher_only=False,
    decipher_only=False,
)


@dataclass
class Authority:
    """A CA that issues server and client certificates."""

    name: str

    def __post_init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.name)])
        self.cert = (
            self._builder(subject, self.key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(CA_KEY_USAGE, critical=True)  # Python 3.13's strict verification asks it
            .sign(self.key, hashes.SHA256())
        )

    def _builder(self, subject: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
        issuer = subject if not hasattr(self, "cert") else self.cert.subject
        return certificate_builder(subject, issuer, public_key, self.key.public_key())

    def issue(self, common_name: str, *, server: bool) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example"),
                x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            ]
        )
        builder = self._builder(subject, key.public_key())
        if server:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
            usage = ExtendedKeyUsageOID.SERVER_AUTH
        else:
            usage = ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        return builder.sign(self.key, hashes.SHA256()), key

    def write(self, path: Path) -> Path:
        path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        return path

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=self.cert.public_bytes(serialization.Encoding.PEM).decode())
        return context


def certificate_builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    issuer_key: ec.EllipticCurvePublicKey,
) -> x509.CertificateBuilder:
    """A day's certificate with the key identifiers Python 3.13's strict verification requires
    (``VERIFY_X509_STRICT``: "Missing Authority Key Identifier" without them)."""
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key), critical=False)
    )


def write_pair(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey, cert_path: Path, key_path: Path) -> None:
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    key_path.write_bytes(key_pem)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def bump_mtime(*paths: Path) -> None:
    """A distinct mtime whatever the file system's resolution (a rewrite may keep the inode and size)."""
    for path in paths:
        stamp = path.stat().st_mtime_ns + 1_000_000_000
        os.utime(path, ns=(stamp, stamp))


@asynccontextmanager
async def tls_gateway(
    cert: Path, key: Path, client_ca: Path | None = None, isolation: Isolation = Isolation.SHARED
) -> AsyncIterator[tuple[str, TlsFiles]]:
    settings = Settings(
        servers=(ServerConfig("test", server_spec(), isolation=isolation),),
        tls_cert_file=str(cert),
        tls_key_file=str(key),
        tls_client_ca_file=str(client_ca) if client_ca else None,
        operator_tokens=(OPERATOR_TOKEN,),  # /status is the operator's once clients present certificates
    )
    app = build_app(settings)
    async with serving(app, **uvicorn_options(app.state.tls, app.state.tls_peers)) as base:
        yield base.replace("http://", "https://"), app.state.tls


async def served_serial(base: str, context: ssl.SSLContext) -> int:
    """The serial number of the certificate a new TLS connection is served."""
    host, port = base.removeprefix("https://").split(":")
    stream = await anyio.connect_tcp(host, int(port), ssl_context=context, tls_standard_compatible=False)
    async with stream:
        der = stream.extra(TLSAttribute.peer_certificate_binary)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


@pytest.mark.timeout(2 * TEST_BOUND + 10)
async def test_the_sdk_client_connects_over_tls_and_plain_http_fails_cleanly(tmp_path: Path) -> None:
    ca = Authority("test CA")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    write_pair(*ca.issue("gateway", server=True), cert, key)
    with anyio.fail_after(2 * TEST_BOUND):
        async with tls_gateway(cert, key) as (base, _):
            http = httpx2.AsyncClient(verify=ca.client_context(), timeout=HTTP_TIMEOUT)
            async with http, Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
                echoed = await client.call_tool("echo", {"message": "over TLS"})
                assert echoed.is_error is not True
            async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as plain:
                with pytest.raises(httpx.TransportError):
                    await plain.post(
                        base.replace("https://", "http://") + "/mcp",
                        headers=modern_headers("tools/call", "echo"),
                        json=modern_call(1, "echo", {"message": "x"}),
                    )
            # The server shrugged it off: the next TLS client is served.
            async with httpx.AsyncClient(verify=ca.client_context(), timeout=HTTP_TIMEOUT) as https:
                assert (await https.get(f"{base}/healthz")).status_code == 200
            async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as untrusting:  # the system CAs do not know ours
                with pytest.raises(httpx.ConnectError):
                    await untrusting.get(f"{base}/healthz")


async def test_a_rotated_certificate_is_served_to_the_next_connection(tmp_path: Path) -> None:
    ca = Authority("test CA")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    first, first_key = ca.issue("gateway", server=True)
    write_pair(first, first_key, cert, key)
    context = ca.client_context()
    with anyio.fail_after(TEST_BOUND):
        async with (
            tls_gateway(cert, key) as (base, tls),
            httpx.AsyncClient(verify=context, timeout=HTTP_TIMEOUT) as kept,
        ):
            assert (await kept.get(f"{base}/healthz")).status_code == 200
            assert await served_serial(base, context) == first.serial_number

            # Half-way through a rotation (the new certificate, the old key): the old pair stays.
            second, second_key = ca.issue("gateway", server=True)
            cert.write_bytes(second.public_bytes(serialization.Encoding.PEM))
            bump_mtime(cert)
            assert await served_serial(base, context) == first.serial_number
            assert tls.reloads == 0

            write_pair(second, second_key, cert, key)
            bump_mtime(cert, key)
            assert await served_serial(base, context) == second.serial_number
            assert tls.reloads == 1
            # A client connected before the rotation carries on.
            assert (await kept.get(f"{base}/healthz")).status_code == 200


async def test_mutual_tls_requires_a_client_certificate_and_its_subject_is_the_principal(tmp_path: Path) -> None:
    server_ca, client_ca = Authority("server CA"), Authority("client CA")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    write_pair(*server_ca.issue("gateway", server=True), cert, key)
    client_ca_file = client_ca.write(tmp_path / "client-ca.crt")
    clients = {}
    for name in ("alice", "bob"):
        client_cert, client_key = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
        write_pair(*client_ca.issue(name, server=False), client_cert, client_key)
        context = server_ca.client_context()
        context.load_cert_chain(client_cert, client_key)
        clients[name] = context
    headers, body = modern_headers("tools/call", "pid"), modern_call(1, "pid")
    with anyio.fail_after(TEST_BOUND):
        async with tls_gateway(cert, key, client_ca_file, isolation=Isolation.PRINCIPAL) as (base, _):
            pids = {}
            for name, context in clients.items():
                async with httpx.AsyncClient(verify=context, timeout=HTTP_TIMEOUT) as http:
                    reply = await http.post(f"{base}/mcp", headers=headers, json=body)
                    assert reply.status_code == 200, reply.text
                    pids[name] = reply.json()["result"]["content"][0]["text"]
                    status = await http.get(f"{base}/status", headers=OPERATOR)
            assert pids["alice"] != pids["bob"]
            pools = " ".join(status.json()["servers"][0]["pools"])
            assert "principal=CN=alice,O=Example" in pools
            assert "principal=CN=bob,O=Example" in pools
            async with httpx.AsyncClient(verify=server_ca.client_context(), timeout=HTTP_TIMEOUT) as anonymous:
                with pytest.raises(httpx.TransportError):  # no client certificate: no handshake
                    await anonymous.post(f"{base}/mcp", headers=headers, json=body)


def test_unreadable_or_mismatched_tls_files_stop_the_gateway_at_start(tmp_path: Path) -> None:
    ca = Authority("test CA")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    write_pair(*ca.issue("gateway", server=True), cert, key)
    other_cert, other_key = tmp_path / "other.crt", tmp_path / "other.key"
    write_pair(*ca.issue("other", server=True), other_cert, other_key)
    with pytest.raises(ConfigError, match="tls-cert-file"):
        TlsFiles(str(cert), str(other_key))
    with pytest.raises(ConfigError, match="No such file"):
        TlsFiles(str(tmp_path / "missing.crt"), str(key))
    with pytest.raises(ConfigError, match="go together"):
        Settings(tls_cert_file=str(cert))


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A server certificate signed by its own key (no CA), for localhost and 127.0.0.1."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "self-signed gateway")])
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        certificate_builder(name, name, key.public_key(), key.public_key())
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "self.crt", tmp_path / "self.key"
    write_pair(cert, key, cert_path, key_path)
    return cert_path, key_path


async def test_call_trusts_a_gateway_certificate_given_with_cacert_and_names_the_flag_without_it(
    tmp_path: Path,
) -> None:
    from tests.integration.test_call_cli import call

    ca = Authority("test CA")
    issued, issued_key = tmp_path / "tls.crt", tmp_path / "tls.key"
    write_pair(*ca.issue("gateway", server=True), issued, issued_key)
    ca_file = ca.write(tmp_path / "ca.crt")
    with anyio.fail_after(TEST_BOUND):
        async with tls_gateway(*self_signed(tmp_path)) as (base, _):
            untrusted = await call(f"{base}/mcp", "echo", "--arg", "message=x")
            trusted = await call(f"{base}/mcp", "echo", "--arg", "message=self", "--cacert", str(tmp_path / "self.crt"))
        async with tls_gateway(issued, issued_key) as (base, _):
            by_leaf = await call(f"{base}/mcp", "echo", "--arg", "message=leaf", "--cacert", str(issued))
            by_ca = await call(f"{base}/mcp", "echo", "--arg", "message=ca", "--cacert", str(ca_file))
    assert untrusted.code == 2
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.err
    assert "pass --cacert FILE (or set SSL_CERT_FILE)" in untrusted.err
    assert (trusted.code, trusted.out) == (0, "self\n"), trusted.err
    assert (by_leaf.code, by_leaf.out) == (0, "leaf\n"), by_leaf.err  # a CA-issued leaf is an anchor too
    assert (by_ca.code, by_ca.out) == (0, "ca\n"), by_ca.err


async def test_an_unreadable_cacert_is_a_usage_error(tmp_path: Path) -> None:
    from tests.integration.test_call_cli import call

    with anyio.fail_after(10):
        run = await call("https://127.0.0.1:9/mcp", "echo", "--cacert", str(tmp_path / "missing.pem"))
    assert run.code == 2
    assert f"--cacert: cannot load {tmp_path / 'missing.pem'}" in run.err


async def test_the_demo_s_try_line_over_tls_works_as_printed(tmp_path: Path) -> None:
    from tests.integration.test_call_cli import call
    from tests.integration.test_startup import gateway_process, logged

    cert, key = self_signed(tmp_path)
    with anyio.fail_after(TEST_BOUND):
        async with gateway_process("--tls-cert-file", str(cert), "--tls-key-file", str(key)) as (_, lines):
            (tried,) = logged(lines, "try:")
            argv = shlex.split(tried)
            assert argv[:2] == ["mcp-stdio-gateway", "call"]
            run = await call(*argv[2:])
    assert argv[-2:] == ["--cacert", str(cert)]
    assert (run.code, run.out) == (0, "hello\n"), run.err
