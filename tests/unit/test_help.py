"""``--help`` as a newcomer reads it: short, subcommands first, names never broken at hyphens."""

from __future__ import annotations

import re

import pytest

from gateway import cli, helptext
from gateway.tools import inspect as inspect_cli
from gateway.tools.call import command

HYPHEN_BREAK = re.compile(r"\w-$", re.M)


@pytest.fixture(params=[50, 80, 120])
def columns(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv("COLUMNS", str(request.param))
    return int(request.param)


def flags(parser: object) -> list[str]:
    return [o for a in parser._actions for o in a.option_strings if o.startswith("--")]  # type: ignore[attr-defined]


def test_no_help_breaks_a_name_at_a_hyphen(columns: int) -> None:
    parsers = [cli.build_parser(), command.build_parser(), inspect_cli.build_parser()]
    full = cli.build_parser()
    full.show_all = True
    for parser in [*parsers, full]:
        text = parser.format_help()
        assert not HYPHEN_BREAK.search(text), text
    full_text = full.format_help()
    for flag in flags(full):
        assert re.search(rf"(^|\s){re.escape(flag)}(\s|,|$)", full_text, re.M), f"{flag} is not shown whole"


def test_the_main_help_is_short_and_starts_with_the_subcommands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    text = cli.build_parser().format_help()
    head = text.splitlines()[:6]
    assert len(text.splitlines()) <= 72  # 70 until --ready-requires wrapped the "more options" list a line longer
    assert any("mcp-stdio-gateway call URL TOOL" in line for line in head)
    assert any("mcp-stdio-gateway inspect -- COMMAND" in line for line in head)
    assert "Arguments after COMMAND go to the server, not the gateway" in text
    assert "[MCP_GATEWAY_PORT]" in text
    assert "--help-all" in text
    for flag in flags(cli.build_parser()):
        assert flag in text  # every option is at least named


def test_help_all_shows_every_option_with_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one line per option, so each can be checked
    parser = cli.build_parser()
    parser.show_all = True
    text = parser.format_help()
    for flag in flags(parser):
        if flag not in helptext.NOT_SETTINGS:
            assert f"[{cli.env_name(flag)}]" in text, flag


def test_call_timeout_states_its_default() -> None:
    text = command.build_parser().format_help()
    assert "default: no limit" in " ".join(text.split())


def test_a_gateway_flag_after_the_server_command_is_warned_about(capsys: pytest.CaptureFixture[str]) -> None:
    settings = cli.parse_settings(["--", "npx", "-y", "server", "--port", "9000", "--pool-min=2"], environ={})
    assert settings.servers[0].spec.args[-2:] == ("9000", "--pool-min=2")  # still passed on, as given
    err = capsys.readouterr().err
    assert "warning: --port comes after the server command, so it goes to the server" in err
    assert "warning: --pool-min comes after" in err


def test_server_flags_that_are_not_the_gateway_s_are_not_warned_about(capsys: pytest.CaptureFixture[str]) -> None:
    cli.parse_settings(["--", "server", "--verbose", "/tmp"], environ={})
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("typed", "meant"), [("cal", "call"), ("calll", "call"), ("inpsect", "inspect"), ("insepct", "inspect")]
)
def test_a_mistyped_subcommand_is_named_instead_of_served(
    typed: str, meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([typed, "--", "http://127.0.0.1:8000/mcp", "echo"]) == 2
    err = capsys.readouterr().err
    assert f"unknown command {typed!r}; did you mean `{meant}`?" in err
    assert f"mcp-stdio-gateway -- {typed}" in err  # how to serve a program of that name after all


@pytest.mark.parametrize("argv", [["npx", "-y", "server"], ["node", "server.js"], ["uvx", "x"], ["--", "cal"]])
def test_a_server_command_is_not_taken_for_a_mistyped_subcommand(argv: list[str]) -> None:
    assert cli.mistyped_subcommand(argv) is None
