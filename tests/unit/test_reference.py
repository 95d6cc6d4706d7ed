"""The configuration reference in docs/ is generated from the code and must be current."""

import pytest

from gateway.reference import main


def test_the_configuration_reference_is_current() -> None:
    assert main(["--check"]) == 0, "docs/configuration.md is stale: run python -m gateway.reference --write"


def test_help_prints_the_usage_not_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--help", "-h"):
        assert main([flag]) == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: python -m gateway.reference")
        assert "--check" in out
        assert "# Configuration reference" not in out


def test_an_unknown_argument_is_refused_with_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--chek"]) == 2
    assert "unknown argument '--chek'" in capsys.readouterr().err
