"""``--max-connections``: the setting, its default from the open-file limit, and the count
every protocol object of one listener shares (``gateway.http.limits.OpenConnections``)."""

from __future__ import annotations

import logging
import resource

import pytest

from gateway.cli import parse_settings
from gateway.errors import ConfigError
from gateway.http import edge_settings
from gateway.http.edge_settings import MAX_CONNECTIONS_CEILING, MIN_CONNECTIONS, default_max_connections
from gateway.http.limits import MAX_REFUSING, PROBE_RESERVE, OpenConnections
from gateway.relay.router import Router
from gateway.relay.server_config import ServerConfig
from tests.conftest import server_spec
from tests.gateway_server import app_for
from tests.logrecords import recording


def test_the_setting_lands_in_the_edge_settings_from_flag_and_variable() -> None:
    assert parse_settings([], environ={}).max_connections is None
    assert parse_settings(["--max-connections", "100"], environ={}).edge().max_connections == 100
    assert parse_settings([], environ={"MCP_GATEWAY_MAX_CONNECTIONS": "7"}).edge().max_connections == 7
    with pytest.raises((ConfigError, SystemExit)):
        parse_settings(["--max-connections", "0"], environ={})


def test_the_app_counts_against_the_setting_or_else_the_default() -> None:
    def router() -> Router:
        return Router(ServerConfig("test", server_spec()))

    assert app_for(router(), max_connections=9).state.connections.cap == 9
    assert app_for(router()).state.connections.cap == default_max_connections()


@pytest.mark.parametrize(
    ("soft", "expected"),
    [
        (1024, 512),
        (1_048_576, MAX_CONNECTIONS_CEILING),
        (resource.RLIM_INFINITY, MAX_CONNECTIONS_CEILING),
        (64, MIN_CONNECTIONS),
    ],
)
def test_the_default_is_half_the_open_file_limit_within_its_bounds(
    monkeypatch: pytest.MonkeyPatch, soft: int, expected: int
) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _: (soft, resource.RLIM_INFINITY))
    assert edge_settings.default_max_connections() == expected


def test_connections_are_admitted_up_to_the_cap_and_a_release_frees_one() -> None:
    connections = OpenConnections(2)
    assert connections.admit()
    assert connections.admit()
    assert not connections.admit()
    assert connections.snapshot() == (2, 2, 0)
    connections.release(True)
    assert connections.admit()
    uncapped = OpenConnections(None)
    assert all(uncapped.admit() for _ in range(10_000))


def test_refusals_are_all_counted_and_their_log_lines_throttled() -> None:
    connections = OpenConnections(1)
    with recording("gateway.http", level=logging.WARNING) as records:
        for _ in range(50):
            connections.refuse("127.0.0.1:5", now=100.0)  # a burst: 5 lines, the rest counted
        connections.refuse("127.0.0.1:5", now=102.0)  # two seconds on: one more, naming the dropped
    assert connections.refused == 51
    lines = [record.getMessage() for record in records.matching(lambda _: True)]
    assert len(lines) == 6
    assert lines[0] == "127.0.0.1:5 refused (503): 1 connections open, the most --max-connections allows"
    assert lines[-1].endswith("(45 more refused since the last line)")


def test_past_the_cap_connections_wait_for_their_503_up_to_a_bound_and_probes_have_a_reserve() -> None:
    connections = OpenConnections(1)
    assert connections.admit() is True
    assert connections.admit() is False  # past the cap: answered 503 at its head
    assert connections.refusing == 1
    assert connections.as_probe()  # it was a probe: served from the reserve
    assert (connections.refusing, connections.probes) == (0, 1)
    for _ in range(PROBE_RESERVE - 1):
        assert connections.admit() is False
        assert connections.as_probe()
    assert connections.admit() is False
    assert not connections.as_probe()  # the reserve is spent: this one gets its 503
    while connections.refusing < MAX_REFUSING:
        assert connections.admit() is False
    assert connections.admit() is None  # closed at once
    assert connections.refused == 1
