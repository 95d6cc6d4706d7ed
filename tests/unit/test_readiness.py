"""The replica's readiness rule over its servers' states (``gateway.relay.readiness``)."""

from __future__ import annotations

from gateway.relay.readiness import Readiness, ServerReadiness, ServerState, replica_readiness, required_names

READY, STARTING, FAILING = ServerState.READY, ServerState.STARTING, ServerState.FAILING


def rule(*servers: ServerReadiness) -> Readiness:
    return replica_readiness(servers)


def server(name: str, state: ServerState, *, required: bool = False, first_start: bool = False) -> ServerReadiness:
    return ServerReadiness(name, state, required, first_start)


def test_every_server_ready_is_plain_ready() -> None:
    assert rule(server("a", READY), server("b", READY)) == Readiness(True, "ready\n")


def test_a_failing_server_is_named_but_the_replica_stays_ready() -> None:
    answer = rule(server("a", READY), server("b", FAILING), server("c", STARTING))
    assert answer == Readiness(True, "ready; degraded: b failing; c starting\n")


def test_a_required_server_that_is_not_ready_makes_the_replica_unready() -> None:
    answer = rule(server("a", READY), server("b", FAILING, required=True), server("c", STARTING))
    assert answer == Readiness(False, "not ready: b failing (required); c starting\n")
    assert rule(server("a", READY), server("b", READY, required=True)) == Readiness(True, "ready\n")


def test_no_server_ready_is_no_replica_ready() -> None:
    assert rule(server("a", FAILING), server("b", STARTING)) == Readiness(False, "not ready: a failing; b starting\n")


def test_the_only_server_is_required_and_named_plainly() -> None:
    assert required_names([("only", False)]) == {"only"}
    assert required_names([("a", False), ("b", True)]) == {"b"}
    assert rule(server("only", FAILING, required=True)) == Readiness(False, "not ready: only failing\n")


def test_a_server_in_its_first_start_holds_the_replica_and_a_restarting_one_does_not() -> None:
    assert not rule(server("a", READY), server("b", STARTING, first_start=True)).ready
    assert rule(server("a", READY), server("b", STARTING)).ready
