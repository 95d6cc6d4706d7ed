"""``--principal-header-required``: when a request without the trusted header gets 401."""

from __future__ import annotations

import pytest

from gateway.config import Settings
from gateway.errors import ConfigError
from gateway.http.app import header_required
from gateway.http.edge_settings import EdgeSettings


@pytest.mark.parametrize(
    ("policy", "others", "required"),
    [
        ("auto", False, True),  # the header is the only authentication: fail closed
        ("auto", True, False),  # tokens, OAuth or certificates authenticate it anyway
        ("yes", True, True),
        ("yes", False, True),
        ("no", False, False),
        ("no", True, False),
    ],
)
def test_the_policy_decides_with_the_other_credentials(policy: str, others: bool, required: bool) -> None:
    settings = EdgeSettings(principal_header="X-User", principal_header_required=policy)
    assert header_required(settings, others=others) is required


def test_without_a_principal_header_nothing_is_required() -> None:
    assert header_required(EdgeSettings(principal_header_required="yes"), others=False) is False


def test_requiring_the_header_without_naming_it_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="--principal-header-required"):
        Settings(principal_header_required="yes")
