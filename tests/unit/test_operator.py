"""Who may read ``/status`` and ``/ui`` (``gateway.http.operator``): the decision, without sockets."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.http.auth import TokenStore
from gateway.http.operator import COOKIE_NAME, COOKIE_SECONDS, OperatorAccess
from gateway.relay.statekeys import StateKeys

pytestmark = pytest.mark.anyio

OPERATOR = "operator-token-0123456789abcdef"
KEY = b"k" * 32
KEYS = StateKeys.fixed(KEY)


def scope(path: str = "/status", client: str = "127.0.0.1") -> dict[str, Any]:
    return {"type": "http", "path": path, "method": "GET", "client": (client, 50000), "headers": []}


def status_of(answer: Any) -> int | None:
    return None if answer is None else int(answer.status_code)


@pytest.mark.parametrize("path", ["/status", "/ui"])
async def test_without_an_operator_token_only_loopback_peers_read_and_none_once_clients_authenticate(path: str) -> None:
    open_locally = OperatorAccess(TokenStore(flag="--operator-token"), keys=KEYS, clients_authenticate=False)
    assert status_of(await open_locally.refusal(scope(path), {})) is None
    assert status_of(await open_locally.refusal(scope(path, "::1"), {})) is None
    for peer in ("10.0.0.5", "192.168.1.20", "2001:db8::1", "not-an-address"):
        refused = await open_locally.refusal(scope(path, peer), {})
        assert status_of(refused) == 403
        assert b"--operator-token-file" in refused.body  # type: ignore[union-attr]
    closed = OperatorAccess(TokenStore(flag="--operator-token"), keys=KEYS, clients_authenticate=True)
    assert status_of(await closed.refusal(scope(path), {})) == 403  # MCP tokens never stand in for the operator's


async def test_the_operator_cookie_opens_until_it_expires_and_only_with_a_token_in_force() -> None:
    now = 1_800_000_000.0
    access = OperatorAccess(
        TokenStore([OPERATOR], flag="--operator-token"), keys=KEYS, clients_authenticate=True, clock=lambda: now
    )
    value = access.mint_cookie(OPERATOR.encode(), now)
    assert OPERATOR not in value
    jar = {b"cookie": f"other=1; {COOKIE_NAME}={value}".encode()}
    assert status_of(await access.refusal(scope(), jar)) is None
    assert status_of(await access.refusal(scope("/ui"), jar)) is None
    assert status_of(await access.refusal(scope(), {b"authorization": f"Bearer {OPERATOR}".encode()})) is None
    assert status_of(await access.refusal(scope(), {b"authorization": b"Bearer " + b"x" * 30})) == 401
    foreign = OperatorAccess(
        TokenStore([OPERATOR], flag="--operator-token"), keys=StateKeys.fixed(b"j" * 32), clients_authenticate=True
    )
    assert (
        status_of(await foreign.refusal(scope(), jar)) == 401
    )  # another key (another deployment) mints no cookie here
    other_token = access.mint_cookie(b"not-an-operator-token-0123", now)
    assert status_of(await access.refusal(scope(), {b"cookie": f"{COOKIE_NAME}={other_token}".encode()})) == 401
    later = OperatorAccess(
        TokenStore([OPERATOR], flag="--operator-token"),
        keys=KEYS,
        clients_authenticate=True,
        clock=lambda: now + COOKIE_SECONDS,
    )
    assert status_of(await later.refusal(scope(), jar)) == 401  # expired
    page = await later.refusal(scope("/ui"), jar)
    assert status_of(page) == 401
    assert b'action="ui/login"' in page.body  # type: ignore[union-attr]
