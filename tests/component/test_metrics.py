"""``/metrics`` over fake children: counters that never fall when a pool goes, the cold-start
histogram, label values without spaces, the process and build metrics, and docs/operations.md
listing every metric the page serves with its type and labels."""

from __future__ import annotations

import platform

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gateway import __version__
from gateway.http.edge_settings import MAX_BODY_BYTES
from gateway.ops.metrics import RequestMetrics
from gateway.relay.owner import OwnerRouting
from gateway.relay.router import Router
from gateway.relay.server_config import DualEra, Isolation, ServerConfig
from gateway.relay.statekeys import StateKeys
from tests import operations_doc
from tests.component.fakechild import fake_backend
from tests.component.harness import FAKE_SPEC, Gateway, in_process_gateway, in_process_servers, legacy_call
from tests.gateway_server import modern_call, modern_headers, open_legacy_session
from tests.logrecords import recording

pytestmark = pytest.mark.anyio

BOUND = 20.0


def samples(text: str) -> list[Sample]:
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def value(text: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 if none)."""
    return sum(s.value for s in samples(text) if s.name == name and labels.items() <= s.labels.items())


def counters(text: str, **labels: str) -> dict[str, float]:
    """Every counter's value (its samples whose labels include ``labels``, summed), by name."""
    families = [f for f in text_string_to_metric_families(text) if f.type in ("counter", "histogram")]
    names = {s.name for f in families for s in f.samples if not s.name.endswith("_created")}
    return {name: value(text, name, **labels) for name in names}


async def scrape(gw: Gateway) -> str:
    answer = await gw.http.get("/metrics")
    assert answer.status_code == 200
    return answer.text


async def scrape_after(gw: Gateway) -> str:
    """``/metrics`` once the app's lifespan has ended (every pool and child has, too)."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gw.app), base_url="http://127.0.0.1") as http:
        return (await http.get("/metrics")).text


async def test_spawn_and_exit_counters_do_not_fall_when_a_session_pool_is_dropped() -> None:
    with anyio.fail_after(BOUND):
        async with (
            fake_backend() as backend,
            in_process_gateway(backend, isolation=Isolation.SESSION, dual_era=DualEra.MODERN) as gw,
        ):
            sessions = [await open_legacy_session(gw.http, gw.url) for _ in range(2)]
            for headers in sessions:
                reply = await gw.http.post(gw.url, headers=headers, json=legacy_call(1, "echo", {"message": "x"}))
                assert reply.status_code == 200
            before = await scrape(gw)
            assert value(before, "mcp_gateway_child_spawns_total", pool="session") == 2
            assert value(before, "mcp_gateway_child_bytes_in_total", pool="session") > 0
            bytes_before = value(before, "mcp_gateway_child_bytes_out_total", pool="session")

            await gw.http.delete(gw.url, headers=sessions[0])  # its pool is dropped at once
            dropped = await scrape(gw)  # the pool is gone from the router; its children may still stop
            [first] = [child for child in backend.children if child.pid == min(c.pid for c in backend.children)]
            await backend.until(lambda: not first.is_running)
            stopped = await scrape(gw)
        after = await scrape_after(gw)  # every pool has ended, and been folded into the totals
    for text in (dropped, stopped, after):
        assert value(text, "mcp_gateway_child_spawns_total", pool="session") == 2
        for name, counted in counters(before, pool="session").items():  # every counter, whatever it counts
            assert value(text, name, pool="session") >= counted, name
        assert value(text, "mcp_gateway_child_bytes_out_total", pool="session") >= bytes_before
        assert value(text, "mcp_gateway_child_start_seconds_count", pool="session") == 2
    assert value(after, "mcp_gateway_child_exits_total", pool="session", reason="code_0") == 2


async def test_child_start_seconds_is_a_histogram_with_its_buckets() -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend() as backend, in_process_gateway(backend) as gw:
            await gw.http.post(gw.url, headers=modern_headers("tools/call", "echo"), json=modern_call(1, "echo", {}))
            text = await scrape(gw)
    [family] = [f for f in text_string_to_metric_families(text) if f.name == "mcp_gateway_child_start_seconds"]
    assert family.type == "histogram"
    buckets = [s for s in family.samples if s.name.endswith("_bucket") and s.labels["pool"] == "shared"]
    assert [s.labels["le"] for s in buckets][-1] == "+Inf"
    assert buckets[-1].value == 1  # the pre-warmed child, started once the call came


async def test_no_label_value_has_a_space() -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend() as backend, in_process_gateway(backend) as gw:
            headers = await open_legacy_session(gw.http, gw.url)
            async with gw.open(b"", {**headers, "accept": "text/event-stream"}, method="GET") as stream:
                assert await stream.start() == 200  # the session's GET stream; leaving ends it
            await stream.done.wait()
            crashed = await gw.http.post(gw.url, headers=headers, json=legacy_call(2, "crash", {"code": 3}))
            assert "error" in crashed.json()
            await gw.http.delete(gw.url, headers=headers)
        text = await scrape_after(gw)  # every child's exit counted
    methods = {s.labels["method"] for s in samples(text) if s.name == "mcp_gateway_requests_total"}
    assert {"initialize", "get_stream", "delete_session", "tools/call"} <= methods
    assert value(text, "mcp_gateway_child_exits_total", reason="code_3") == 1
    spaced = {(s.name, k, v) for s in samples(text) for k, v in s.labels.items() if " " in v}
    assert not spaced


async def test_process_python_and_build_info_metrics_are_served() -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend() as backend, in_process_gateway(backend) as gw:
            text = await scrape(gw)
    names = {s.name for s in samples(text)}
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_start_time_seconds"} <= names
    assert {"python_info", "python_gc_collections_total"} <= names
    [build] = [s for s in samples(text) if s.name == "mcp_gateway_build_info"]
    assert build.value == 1
    assert build.labels == {"version": __version__, "python": platform.python_version()}


def served(texts: list[str]) -> dict[str, tuple[str, frozenset[str]]]:
    """Every metric on these pages, named as Prometheus names it (a counter with ``_total``): its
    type and the labels its samples have (a histogram's ``le`` aside)."""
    found: dict[str, tuple[str, set[str]]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            if family.name.endswith("_created"):  # a counter's or histogram's _created samples
                continue
            name = family.name + "_total" if family.type == "counter" else family.name
            kind, labels = found.setdefault(name, (family.type, set()))
            assert kind == family.type, name
            labels |= {label for sample in family.samples for label in sample.labels} - {"le"}
    return {name: (kind, frozenset(labels)) for name, (kind, labels) in found.items()}


async def test_the_operations_page_lists_every_metric_served_with_its_type_and_labels() -> None:
    """docs/operations.md, "Every metric", against a scrape in which every metric has samples:
    a call, a legacy session, a crash (an exit's ``reason``), owner routing (``mcp_gateway_instance``)."""
    keys = StateKeys.fixed(b"k" * 32)
    routing = OwnerRouting("http://127.0.0.1:1", keys, max_body_bytes=MAX_BODY_BYTES, label="worker 2 of 3")
    with anyio.fail_after(BOUND):
        async with fake_backend() as backend, in_process_gateway(backend, owner_routing=routing) as gw:
            await gw.http.post(gw.url, headers=modern_headers("tools/call", "echo"), json=modern_call(1, "echo", {}))
            headers = await open_legacy_session(gw.http, gw.url)
            await gw.http.post(gw.url, headers=headers, json=legacy_call(2, "crash", {"code": 3}))
            running = await scrape(gw)  # the pools' gauges
        ended = await scrape_after(gw)  # every exit counted
    on_the_page = served([running, ended])
    spaced = {
        (s.name, k, v) for text in (running, ended) for s in samples(text) for k, v in s.labels.items() if " " in v
    }
    assert not spaced  # mcp_gateway_instance's too
    assert value(ended, "mcp_gateway_instance", worker="worker_2_of_3") == 1
    listed = operations_doc.metrics()
    unlabelled = {name for name, (_, labels) in listed.items() if not labels and name.startswith("mcp_gateway_")}
    assert unlabelled == {
        "mcp_gateway_log_lines_dropped_total",
        "mcp_gateway_connections_open",
        "mcp_gateway_connections_max",
        "mcp_gateway_connections_refused_total",
    }
    assert all(
        labels
        for name, (_, labels) in on_the_page.items()
        if name.startswith("mcp_gateway_") and name not in unlabelled
    ), on_the_page
    assert sorted(set(on_the_page) - set(listed)) == [], "served, not in docs/operations.md"
    assert sorted(set(listed) - set(on_the_page)) == [], "in docs/operations.md, not served"
    wrong = {name: (listed[name], found) for name, found in on_the_page.items() if listed[name] != found}
    assert wrong == {}, "docs/operations.md says (type, labels), /metrics serves"


SERVER_PART = {
    f"mcp_gateway_{name}"
    for name in (
        "children", "queue_waiting", "child_spawns_total", "child_restarts_total", "child_start_seconds_count",
        "sessions", "session_streams", "server_state", "children_resident_bytes", "children_cpu_seconds_total",
    )
}  # fmt: skip
"""Series of one server's part of the page (a sample of each)."""


async def test_a_fault_collecting_one_servers_series_leaves_out_that_server_only_and_is_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fault reading one server's pools (here its tallies) is contained: the page answers 200
    with the other server's series and every other part; the faulty server's series are left out
    whole (none of them, not half), the failure is counted by part and server, and logged once
    with its traceback, not at every scrape. A fault in another collector (the request counts)
    leaves out that part only. Before, any such fault failed the whole page with a 500."""
    with anyio.fail_after(BOUND), recording("gateway.metrics") as records:
        async with (
            fake_backend() as good_backend,
            fake_backend() as bad_backend,
            in_process_servers(
                [
                    Router(ServerConfig("good", FAKE_SPEC), backend=good_backend),
                    Router(ServerConfig("bad", FAKE_SPEC), backend=bad_backend),
                ]
            ) as gw,
        ):
            call = modern_call(1, "echo", {"message": "x"})
            for server in ("good", "bad"):
                await gw.http.post(f"/servers/{server}/mcp", headers=modern_headers("tools/call", "echo"), json=call)
            healthy = await scrape(gw)
            [bad] = [router for router in gw.app.state.routers if router.server.name == "bad"]

            def broken_tallies() -> None:
                raise RuntimeError("a bug in the bad server's tallies")

            monkeypatch.setattr(bad, "tallies", broken_tallies)
            first, second = await scrape(gw), await scrape(gw)

            def broken_collect(self: RequestMetrics) -> None:
                raise RuntimeError("a bug in the request counts")

            monkeypatch.setattr(RequestMetrics, "collect", broken_collect)
            third = await scrape(gw)
    assert value(healthy, "mcp_gateway_scrape_failures_total") == 0
    assert value(healthy, "mcp_gateway_scrape_failures_total", part="server", server="bad") == 0  # served from 0
    assert value(healthy, "mcp_gateway_server_state", server="bad", state="ready") == 1
    for text in (first, second, third):
        assert value(text, "mcp_gateway_server_state", server="good", state="ready") == 1
        assert value(text, "mcp_gateway_child_spawns_total", server="good") >= 1
        assert not [s for s in samples(text) if s.labels.get("server") == "bad" and s.name in SERVER_PART]
        good_usage = [s for s in samples(text) if s.name in SERVER_PART and s.labels.get("server") == "good"]
        assert {s.name for s in good_usage} == SERVER_PART  # every one of the good server's series
        assert value(text, "process_cpu_seconds_total") > 0
    assert value(first, "mcp_gateway_scrape_failures_total", part="server", server="bad") == 1
    assert value(second, "mcp_gateway_scrape_failures_total", part="server", server="bad") == 2
    assert value(second, "mcp_gateway_requests_total", server="good") >= 1
    assert value(third, "mcp_gateway_requests_total") == 0  # that part is left out
    assert value(third, "mcp_gateway_scrape_failures_total", part="requests", server="") == 1
    logged = records.matching(lambda r: r.levelname == "ERROR")
    assert [r.getMessage().split(":")[1].strip() for r in logged] == [
        "collecting the series of server bad failed",
        "collecting the requests metrics failed",
    ]
    assert all(r.exc_info for r in logged)
