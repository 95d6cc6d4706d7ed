"""The access line's correlation fields read from the edge's dict of the headers (``named``)
are the ones read from the headers themselves: a served call, and a request refused before
that dict was made (431, too many headers), each say the client's ``X-Request-Id``,
``traceparent`` and ``Mcp-Name`` (the last of a repeated header)."""

from __future__ import annotations

from typing import Final

import anyio
import pytest

from gateway.http.limits import MAX_HEADERS
from tests.component.fakechild import fake_backend
from tests.component.harness import in_process_gateway
from tests.gateway_server import modern_call, modern_headers
from tests.logrecords import recording

pytestmark = pytest.mark.anyio
BOUND: Final = 20.0
TRACE: Final = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT: Final = f"00-{TRACE}-b7ad6b7169203331-01"


async def test_a_served_call_and_a_refused_request_say_the_same_correlation() -> None:
    served = modern_headers("tools/call", "echo", traceparent=TRACEPARENT)
    headers = [*served.items(), ("x-request-id", "first"), ("x-request-id", "req/7 ok")]
    many = [*headers, *((f"x-filler-{n}", "1") for n in range(MAX_HEADERS))]
    with anyio.fail_after(BOUND), recording("gateway.access") as records:
        async with fake_backend() as backend, in_process_gateway(backend) as gw:
            reply = await gw.http.post(gw.url, headers=headers, json=modern_call(1, "echo"))
            assert reply.status_code == 200, reply.text
            refused = await gw.http.post(gw.url, headers=many, json=modern_call(2, "echo"))
            assert refused.status_code == 431
    lines = [r.__dict__ for r in records.records if r.__dict__.get("event") == "request"]
    assert [(line["status"], line["request_id"], line["trace_id"], line["mcp_name"]) for line in lines] == [
        (200, "req/7_ok", TRACE, "echo"),
        (431, "req/7_ok", TRACE, "echo"),
    ]
