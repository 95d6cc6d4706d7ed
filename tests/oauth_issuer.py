"""A stand-in OAuth authorization server for tests: RFC 8414 metadata and a JWKS, on loopback.

``Issuer`` holds RSA keys the test mints (``cryptography``), signs access tokens with them
(PyJWT) and serves, as a tiny Starlette app, ``/.well-known/oauth-authorization-server``
(naming ``jwks_uri``) and ``/jwks``. It counts JWKS fetches (``jwks_fetches``) so a test can
tell exactly how often the gateway refreshed, can rotate its keys (``rotate``), can fail
its JWKS (``failing``) and can hang it (``hang()``: every JWKS request waits, answering
nothing, until ``release()``). Tokens that no honest issuer makes (``alg: none``, HMAC signed with
the public key) are crafted by hand, since PyJWT refuses to make them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.gateway_server import serving


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Issuer:
    def __init__(self) -> None:
        self.url = ""  # set once served
        self.keys: dict[str, rsa.RSAPrivateKey] = {"key-1": new_key()}
        self.current = "key-1"
        self.jwks_fetches = 0
        self.metadata_fetches = 0
        self.failing = False
        self.padding = 0  # bytes of junk added to the JWKS document
        self.hanging: anyio.Event | None = None  # set: hung JWKS requests answer
        self.hung = anyio.Event()  # set when a JWKS request reaches a hang

    def hang(self) -> None:
        """From now on, JWKS requests get no answer until ``release``."""
        self.hanging = anyio.Event()
        self.hung = anyio.Event()

    def release(self) -> None:
        if self.hanging is not None:
            self.hanging.set()
            self.hanging = None

    def rotate(self, kid: str) -> None:
        """Publish a new key, sign with it from now on, and withdraw the old ones."""
        self.keys = {kid: new_key()}
        self.current = kid

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid, key in self.keys.items():
            jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
            keys.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})
        return {"keys": keys}

    def claims(self, audience: str, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims = {"iss": self.url, "aud": audience, "sub": "alice", "iat": now, "exp": now + 300, "scope": "mcp"}
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def token(self, audience: str, *, kid: str | None = None, key: Any = None, **claims: Any) -> str:
        kid = kid or self.current
        signing_key = key if key is not None else self.keys[kid]
        return jwt.encode(self.claims(audience, **claims), signing_key, algorithm="RS256", headers={"kid": kid})

    def unsigned_token(self, audience: str) -> str:
        """``alg: none``: a token with no signature at all."""
        header = b64url(json.dumps({"alg": "none", "typ": "JWT", "kid": self.current}).encode())
        return f"{header}.{b64url(json.dumps(self.claims(audience)).encode())}."

    def hmac_public_key_token(self, audience: str) -> str:
        """HS256 with the issuer's *public* key (PEM) as the secret: the classic key-confusion attack."""
        public = self.keys[self.current].public_key()
        pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        header = b64url(json.dumps({"alg": "HS256", "typ": "JWT", "kid": self.current}).encode())
        payload = b64url(json.dumps(self.claims(audience)).encode())
        signature = hmac.new(pem, f"{header}.{payload}".encode(), hashlib.sha256).digest()
        return f"{header}.{payload}.{b64url(signature)}"

    def app(self) -> Starlette:
        async def metadata(request: Request) -> Response:
            self.metadata_fetches += 1
            return JSONResponse({"issuer": self.url, "jwks_uri": f"{self.url}/jwks", "response_types_supported": []})

        async def jwks(request: Request) -> Response:
            if self.hanging is not None:
                self.hung.set()
                await self.hanging.wait()
            if self.failing:
                return JSONResponse({"error": "down"}, status_code=500)
            self.jwks_fetches += 1
            return JSONResponse({**self.jwks(), "padding": "x" * self.padding})

        return Starlette(
            routes=[
                Route("/.well-known/oauth-authorization-server", metadata),
                Route("/jwks", jwks),
            ]
        )


@asynccontextmanager
async def running_issuer() -> AsyncIterator[Issuer]:
    issuer = Issuer()
    async with serving(issuer.app()) as base:
        issuer.url = base
        yield issuer
