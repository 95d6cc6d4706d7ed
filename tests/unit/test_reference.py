"""The configuration reference in docs/ is generated from the code and must be current."""

from gateway.reference import main


def test_the_configuration_reference_is_current() -> None:
    assert main(["--check"]) == 0, "docs/configuration.md is stale: run python -m gateway.reference --write"
