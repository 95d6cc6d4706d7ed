"""The note that MRTR ``requestState`` is signed with a random per-process secret (issue #41):
a WARNING only where other processes may serve the endpoint (owner routing, or a bind address
a load balancer reaches), at INFO for a single local gateway; said once, and not at all with
``--state-secret-file``."""

from __future__ import annotations

import logging

import anyio
import pytest

from gateway.protocol.jsonrpc import Request
from gateway.relay.statekeys import StateKeys
from gateway.relay.suspensions import Suspensions
from tests.conftest import server_spec
from tests.gateway_server import running_gateway
from tests.integration.test_call_cli import call
from tests.logrecords import Records, recording

pytestmark = pytest.mark.anyio

NOTE = "MRTR requestState is signed with a random per-process secret"


def notes(records: Records) -> list[logging.LogRecord]:
    return records.matching(lambda record: NOTE in record.getMessage())


async def mint_twice(secret: bytes | None, *, replicas: bool) -> list[logging.LogRecord]:
    with recording("gateway.mrtr") as records:
        async with anyio.create_task_group() as tg:
            keys = StateKeys.fixed(secret) if secret is not None else None
            suspensions = Suspensions("fs", keys, task_group=tg, replicas=replicas)
            for _ in range(2):
                suspensions.mint_round(Request(1, "tools/call", {"name": "read"}), "alice", 300)
    return notes(records)


async def test_a_single_local_gateway_notes_the_random_secret_once_at_info() -> None:
    [note] = await mint_twice(None, replicas=False)
    assert note.levelno == logging.INFO
    assert "other replicas" not in note.getMessage()


async def test_a_gateway_that_may_have_replicas_warns_once_that_they_refuse_its_tokens() -> None:
    [note] = await mint_twice(None, replicas=True)
    assert note.levelno == logging.WARNING
    assert "other replicas will refuse this gateway's tokens" in note.getMessage()
    assert "--state-secret-file" in note.getMessage()


async def test_a_shared_secret_is_not_noted() -> None:
    assert await mint_twice(b"k" * 32, replicas=True) == []


@pytest.mark.parametrize(("loopback_only", "level"), [(True, logging.INFO), (False, logging.WARNING)])
async def test_a_gateway_bound_beyond_loopback_warns_and_a_local_one_does_not(loopback_only: bool, level: int) -> None:
    with anyio.fail_after(30), recording("gateway.mrtr") as records:
        async with running_gateway(server_spec("--era", "legacy"), loopback_only=loopback_only) as url:
            # The legacy child asks for roots mid-call: the gateway signs an MRTR round for call.
            asks = '{"requests": [{"method": "roots/list"}]}'
            run = await call(url, "ask_client", "--json", asks, "--root", "/srv")
            assert run.code == 0, run.err
            await records.wait_for_text(NOTE)
    assert [note.levelno for note in notes(records)] == [level]
