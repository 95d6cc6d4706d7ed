"""The protocol version registry: eras, order by registry place, negotiation."""

from __future__ import annotations

import pytest

from gateway.protocol import versions
from gateway.protocol.versions import Era


def test_the_registry_lists_the_legacy_revisions_then_the_modern_one_oldest_first() -> None:
    assert versions.ALL_VERSIONS == ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28")
    assert versions.LATEST_LEGACY == "2025-11-25"
    assert versions.LATEST_MODERN == "2026-07-28"


@pytest.mark.parametrize(
    ("version", "era"),
    [
        ("2026-07-28", Era.MODERN),
        ("2024-11-05", Era.LEGACY),
        ("2025-11-25", Era.LEGACY),
        ("2099-01-01", None),
        ("", None),
    ],
)
def test_era_of_names_the_era_of_known_versions_only(version: str, era: Era | None) -> None:
    assert versions.era_of(version) is era
    assert versions.is_known(version) is (era is not None)


def test_eras_are_strings_for_logs_and_config() -> None:
    assert str(Era.MODERN) == f"{Era.MODERN}" == "modern"
    assert Era("legacy") is Era.LEGACY


def test_rank_orders_versions_by_their_place_in_the_registry() -> None:
    ranks = [versions.rank(version) for version in versions.ALL_VERSIONS]

    assert ranks == sorted(ranks) == list(range(len(versions.ALL_VERSIONS)))
    assert versions.rank(versions.LATEST_MODERN) > versions.rank(versions.LATEST_LEGACY)


def test_rank_refuses_an_unknown_version() -> None:
    with pytest.raises(ValueError, match="not in"):
        versions.rank("2099-01-01")


@pytest.mark.parametrize("version", versions.LEGACY_VERSIONS)
def test_legacy_negotiation_echoes_a_supported_legacy_version(version: str) -> None:
    assert versions.negotiate_legacy(version) == version


@pytest.mark.parametrize("version", ["2026-07-28", "2099-01-01", "2024-10-07", ""])
def test_legacy_negotiation_offers_the_latest_legacy_version_for_anything_else(version: str) -> None:
    assert versions.negotiate_legacy(version) == "2025-11-25"


@pytest.mark.parametrize(
    ("offered", "expected"),
    [
        (["2024-11-05", "2025-06-18"], "2025-06-18"),
        (["2025-06-18", "2024-11-05"], "2025-06-18"),
        (("2025-03-26",), "2025-03-26"),
        (["2026-07-28", "2099-01-01"], None),
        ([], None),
    ],
)
def test_newest_common_picks_our_newest_version_that_the_peer_offered(
    offered: list[str] | tuple[str, ...], expected: str | None
) -> None:
    assert versions.newest_common(offered, versions.LEGACY_VERSIONS) == expected


def test_the_http_default_and_batch_versions_are_legacy() -> None:
    assert versions.era_of(versions.DEFAULT_LEGACY_HTTP_VERSION) is Era.LEGACY
    assert {"2025-03-26"} == versions.BATCH_VERSIONS
