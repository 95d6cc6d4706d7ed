"""The pure rules of roots keying (issue #23): a client's roots answer as a value, its name in
the pool key, which keys carry it, and the gateway's own round's ``requestState``."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol.jsonrpc import Request
from gateway.protocol.outcome import Rejection
from gateway.protocol.roots import MAX_ROOTS_PER_SET, roots_key, roots_of_answer
from gateway.protocol.versions import Era
from gateway.relay import client_roots
from gateway.relay.poolkey import PoolKey
from gateway.relay.router import MAX_TOLD_MEMO_BYTES, Router
from gateway.relay.server_config import ROOTS_LEARN_WAIT, CapabilityKeying, DualEra, Isolation, ServerConfig
from gateway.relay.statekeys import StateKeys
from gateway.relay.suspensions import Suspensions
from gateway.stdio.spec import ChildSpec

ALICE = ({"uri": "file:///home/alice", "name": "alice"},)
BOB = ({"uri": "file:///home/bob"},)
WITH_ROOTS: dict[str, object] = {"sampling": {}, "elicitation": {}, "roots": {}}

uris = st.lists(st.from_regex(r"file:///[a-z]{1,8}(/[a-z]{1,8}){0,2}", fullmatch=True), max_size=5)


def test_a_roots_answer_keeps_uri_and_name_in_order_and_drops_the_rest() -> None:
    answer = {"roots": [{"uri": "file:///b", "name": "b", "_meta": {"x": 1}}, {"uri": "file:///a"}]}
    assert roots_of_answer(answer) == ({"uri": "file:///b", "name": "b"}, {"uri": "file:///a"})
    assert roots_of_answer({"roots": []}) == ()


def test_what_is_not_a_roots_answer_says_why() -> None:
    for bad, why in [
        ({}, "roots array"),
        ({"roots": "file:///a"}, "roots array"),
        ({"roots": [{"uri": "http://a"}]}, "roots[0].uri"),
        ({"roots": [{"uri": "file:///a", "name": 3}]}, "roots[0].name"),
        ({"roots": [{"uri": f"file:///{i}"} for i in range(MAX_ROOTS_PER_SET + 1)]}, "MAX_ROOTS_PER_SET"),
    ]:
        found = roots_of_answer(bad)
        assert isinstance(found, str)
        assert why in found, (bad, found)


@given(uris, uris)
def test_two_roots_sets_have_one_key_exactly_when_they_are_the_same_list(first: list[str], second: list[str]) -> None:
    a = tuple({"uri": uri} for uri in first)
    b = tuple({"uri": uri} for uri in second)
    assert (roots_key(a) == roots_key(b)) == (a == b)


def test_the_pool_label_names_the_roots_set() -> None:
    key = PoolKey("shared", told="roots", roots=roots_key(ALICE))
    assert key.label("fs") == f"fs capabilities=roots roots={roots_key(ALICE)}"
    assert PoolKey("shared").label("fs") == "fs"


def legacy_router(isolation: Isolation = Isolation.SHARED, **spec: Any) -> Router:
    child = ChildSpec("node", **spec)  # every child opened with initialize: told capabilities
    return Router(ServerConfig("fs", child, isolation=isolation, dual_era=DualEra.LEGACY))


def test_clients_with_other_roots_sets_get_other_pools_and_the_same_set_the_same_pool() -> None:
    router = legacy_router()
    alice = router.key_for("p", None, {}, Era.LEGACY, WITH_ROOTS, ALICE)
    assert alice.roots == roots_key(ALICE)
    assert router.key_for("q", None, {}, Era.MODERN, WITH_ROOTS, ALICE) == alice  # era and principal aside
    assert router.key_for("p", None, {}, Era.LEGACY, WITH_ROOTS, BOB) != alice
    assert router.key_for("p", None, {}, Era.LEGACY, WITH_ROOTS).roots == ""  # not learned: no client's roots


def test_a_roots_set_the_usual_children_are_given_already_needs_no_pool_of_its_own() -> None:
    # No roots configured: an empty set is what the usual children have (the SDK client's).
    assert legacy_router().key_for("p", None, {}, Era.LEGACY, WITH_ROOTS, ()) == PoolKey("shared")
    # Roots configured: a client giving exactly those shares the usual children too.
    router = legacy_router(roots=ALICE)
    assert router.key_for("p", None, {}, Era.LEGACY, WITH_ROOTS, ALICE) == PoolKey("shared")
    assert router.key_for("p", None, {}, Era.LEGACY, WITH_ROOTS, ()).roots == roots_key(())
    assert router.key_for("p", None, {}, Era.LEGACY, WITH_ROOTS, BOB).roots == roots_key(BOB)


def test_children_are_told_the_configured_capabilities_unless_keying_is_exact() -> None:
    # Shared (the default): whatever a client declares, one pool serves it (issue #36).
    shared = legacy_router()
    for declared in ({}, {"sampling": {}}, {"elicitation": {"form": {}}}, WITH_ROOTS):
        assert shared.key_for("p", None, {}, Era.LEGACY, declared) == PoolKey("shared")
    # Exact: each declaration its own told set, as before.
    child = ChildSpec("node")
    exact = Router(ServerConfig("fs", child, dual_era=DualEra.LEGACY, capability_keying=CapabilityKeying.EXACT))
    told = {exact.key_for("p", None, {}, Era.LEGACY, declared).told for declared in ({}, {"sampling": {}}, WITH_ROOTS)}
    assert told == {"none", "sampling", ""}  # WITH_ROOTS is the configured set itself


def test_a_declaration_longer_than_the_memo_bound_is_worked_out_each_time_not_remembered() -> None:
    child = ChildSpec("node")
    exact = Router(ServerConfig("fs", child, dual_era=DualEra.LEGACY, capability_keying=CapabilityKeying.EXACT))
    long = {"sampling": {}, "experimental": {"padding": "x" * MAX_TOLD_MEMO_BYTES}}
    assert exact.key_for("p", None, {}, Era.LEGACY, long).told == "sampling"  # told as any
    assert len(exact._told_sets) == 0  # a client's megabytes are not kept for the process's life
    assert exact.key_for("p", None, {}, Era.LEGACY, {"sampling": {}}).told == "sampling"
    assert len(exact._told_sets) == 1


def test_children_told_no_roots_are_never_keyed_by_a_roots_set() -> None:
    # Configured to declare nothing about roots: the client's roots cannot reach the child.
    router = legacy_router(client_capabilities={"sampling": {}})
    assert router.key_for("p", None, {}, Era.LEGACY, WITH_ROOTS, ALICE).roots == ""


def test_a_sessions_own_pool_is_keyed_by_its_roots_and_no_other_sessions() -> None:
    """Under ``isolation: session`` the child a session starts with fetched its roots before
    the session could be asked (it kept the configured ones): a session that declares roots
    runs its calls on a pool of its own given its set, like a shared roots pool (a session
    without roots, or with the configured set, on its own pool as before)."""
    router = legacy_router(Isolation.SESSION)
    alice = router.key_for("p", "s1", {}, Era.LEGACY, WITH_ROOTS, ALICE)
    assert alice.scope == "session:s1"
    assert alice.roots == roots_key(ALICE)
    assert router.key_for("p", "s2", {}, Era.LEGACY, WITH_ROOTS, ALICE).scope == "session:s2"  # never shared
    assert router.key_for("p", "s1", {}, Era.LEGACY, WITH_ROOTS, BOB).roots == roots_key(BOB)
    assert router.key_for("p", "s1", {}, Era.LEGACY, WITH_ROOTS, ()).roots == ""  # the configured set (none)
    assert router.key_for("p", "s1", {}, Era.LEGACY, WITH_ROOTS, None).roots == ""


def request(name: str = "read") -> Request:
    return Request(1, "tools/call", {"name": name, "arguments": {}})


@pytest.mark.anyio
async def test_the_gateways_round_is_bound_to_its_request_and_principal() -> None:
    now = [1000.0]
    async with anyio.create_task_group() as tg:  # the keepers' (none runs: a round parks nothing)
        suspensions = Suspensions("fs", StateKeys.fixed(b"k" * 32), task_group=tg, clock=lambda: now[0])
        token = suspensions.mint_round(request(), "alice", 300)
        assert suspensions.check_round(token, request(), "alice") == "roots"
        assert suspensions.check_round(token, request(), "alice") == "roots"  # not single-use: it holds nothing
        url = suspensions.mint_round(request(), "alice", 300, kind="url")
        assert suspensions.check_round(url, request(), "alice") == "url"
        for other, principal in [(request("write"), "alice"), (request(), "bob")]:
            refused = suspensions.check_round(token, other, principal)
            assert isinstance(refused, Rejection)
            assert refused.status == 400
        now[0] += 301
        assert isinstance(suspensions.check_round(token, request(), "alice"), Rejection)  # expired


def test_a_retry_gives_roots_under_the_rounds_key_and_the_child_never_sees_the_round() -> None:
    retry = Request(
        2, "tools/call", {"name": "read", "inputResponses": {"roots": {"roots": list(ALICE)}}, "requestState": "x"}
    )
    assert client_roots.from_retry(retry) == ALICE
    assert client_roots.without_round(retry).params == {"name": "read"}
    assert client_roots.from_retry(Request(2, "tools/call", {"inputResponses": {}})) is None
    assert isinstance(client_roots.from_retry(Request(2, "tools/call", {"inputResponses": {"roots": {}}})), Rejection)


@pytest.mark.parametrize("isolation", [Isolation.SHARED, Isolation.PRINCIPAL, Isolation.SESSION])
@pytest.mark.parametrize("keying", [CapabilityKeying.SHARED, CapabilityKeying.EXACT])
def test_a_modern_client_of_a_server_probed_modern_keeps_its_scope_key(
    isolation: Isolation, keying: CapabilityKeying
) -> None:
    # ``pool_for`` skips ``_refine`` for such a client: what it would give is the scope key itself.
    router = Router(ServerConfig("fs", ChildSpec("node"), isolation=isolation, capability_keying=keying))
    router._probed_era = Era.MODERN  # its first probed child is up, and modern
    router.roots_kept = True
    assert not router._tells_capabilities(PoolKey("shared"))
    for session_id in (None, "s1"):
        base = router._scope_key("p", session_id, {})
        for declared in (None, {}, {"sampling": {}}, WITH_ROOTS):
            for roots in (None, (), ALICE):
                assert router._refine(base, Era.MODERN, declared, roots) is base


def _started(seconds_ago: float) -> Any:
    """A pool with one live child up ``seconds_ago``, that asks nothing: what ``_keeps_roots`` reads."""
    child = SimpleNamespace(asks_open=lambda method: False)
    member = SimpleNamespace(started_at=time.monotonic() - seconds_ago, is_live=True, child=child)
    return SimpleNamespace(members=[member])


@pytest.mark.anyio
@pytest.mark.parametrize("window", [0.0, 0.5])
async def test_past_the_learn_wait_a_server_none_of_whose_children_fetched_keeps_no_roots(window: float) -> None:
    # --roots-learn-wait 0 (decide at once), or a window already over: no wait at all.
    router = Router(ServerConfig("memory", ChildSpec("node"), roots_learn_wait=window))
    found: list[bool] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _append(found, router._keeps_roots(_started(1.0))))
        await anyio.wait_all_tasks_blocked()
        assert found == [False]  # decided without waiting
    assert router.roots_kept is False


@pytest.mark.anyio
async def test_within_the_learn_wait_a_roots_call_waits_for_the_servers_first_fetch() -> None:
    router = Router(ServerConfig("fs", ChildSpec("node"), roots_learn_wait=60.0))  # longer than this test
    found: list[bool] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _append(found, router._keeps_roots(_started(1.0))))
        await anyio.wait_all_tasks_blocked()
        assert found == []  # waiting, 59 s left of the window
        router._learn_keeps_roots("outside a call")
    assert found == [True]
    assert router.roots_kept is True


async def _append(found: list[bool], decided: Awaitable[bool]) -> None:
    found.append(await decided)


@pytest.mark.parametrize(("window", "learnt"), [(ROOTS_LEARN_WAIT, True), (0.0, None)])
def test_a_roots_list_during_a_call_right_after_start_teaches_keeping_only_within_the_learn_wait(
    window: float, learnt: bool | None
) -> None:
    # Within the window it may be the child's start-up fetch, met by a call in flight: taken as
    # keeping roots (the safe side). --roots-learn-wait 0 says there is none to wait for.
    router = Router(ServerConfig("fs", ChildSpec("node", answers_roots=True), roots_learn_wait=window))
    pool = _started(0.0)
    child = pool.members[0].child
    child.spec = router.server.spec
    router.pools[PoolKey("shared")] = pool
    router.note_roots_question(child)
    assert router.roots_kept is learnt
