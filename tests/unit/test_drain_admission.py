"""What a draining gateway still lets in (``gateway.http.drain``), and that a parked call is
counted in flight for the drain exactly as long as it is held."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.http.drain import DRAINING, Drain, DrainedQuota, admitted_while_draining
from gateway.http.limits import PrincipalQuotas


def scope(method: str, **headers: str) -> dict[str, Any]:
    raw = [(name.replace("_", "-").encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
    return {"type": "http", "method": method, "headers": raw}


@pytest.mark.parametrize(
    ("method", "headers", "admitted"),
    [
        ("POST", {"Mcp-Session-Id": "abc"}, True),  # a legacy session's answers
        ("POST", {"mcp-method": "tools/call"}, True),  # maybe the retry of a parked call
        ("POST", {"MCP-METHOD": "prompts/get"}, True),
        ("POST", {"mcp-method": "resources/read"}, True),
        ("POST", {"mcp-method": "notifications/cancelled"}, True),  # maybe ends a parked call
        ("POST", {"mcp-method": "tools/list"}, False),
        ("POST", {"mcp-method": "tasks/get"}, True),  # maybe a task held here
        ("POST", {"mcp-method": "tasks/update"}, True),
        ("POST", {"mcp-method": "tasks/cancel"}, True),
        ("POST", {"mcp-method": "tasks/list"}, False),
        ("POST", {"mcp-method": "Tools/Call"}, False),  # the method is case-sensitive
        ("POST", {"mcp-name": "tools/call"}, False),
        ("POST", {}, False),  # initialize and the rest: new work
        ("GET", {"mcp-method": "tools/call"}, False),
        ("DELETE", {"Mcp-Session-Id": "abc"}, False),
    ],
)
def test_only_posts_that_may_finish_work_the_drain_waits_for_are_let_in(
    method: str, headers: dict[str, str], admitted: bool
) -> None:
    request = scope(method, **headers)
    assert admitted_while_draining(request) is admitted
    assert (DRAINING in request) is admitted  # the endpoint refuses what it finds to be new work


def test_a_parked_call_counts_in_flight_for_the_drain_until_it_is_let_go_once() -> None:
    drain, quotas = Drain(), PrincipalQuotas(max_requests=4, max_streams=4)
    let_go = DrainedQuota(quotas, drain).hold("alice")
    drain.begin()
    assert (drain.in_flight, drain.held) == (1, 1)  # held: no request, a parked call (the drain's log says which)
    assert quotas.over_limit("alice") is None
    let_go()
    let_go()  # a second call changes nothing
    assert (drain.in_flight, drain.held) == (0, 0)
    assert quotas.parked == {}
