"""Every setting is declared once (gateway.settings), and every default the code uses is the declared one."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gateway.cli import build_parser, parse_settings
from gateway.config import Settings
from gateway.configfile import FLAG_KEYS
from gateway.errors import ConfigError
from gateway.http.edge_settings import EdgeSettings
from gateway.oauth.validation import OAuthPolicy
from gateway.relay.server_config import ServerConfig
from gateway.settings import BY_FLAG, GATEWAY_WIDE, PER_SERVER, SETTINGS, Setting
from gateway.stdio.pool import PoolSettings
from gateway.stdio.spec import ChildSpec

OWNERS: dict[str, type] = {"spec": ChildSpec, "pool": PoolSettings, "server": ServerConfig, "oauth": OAuthPolicy}
"""Where a per-server setting's ``target`` lands."""
WITHOUT_DEFAULT = {"--pool-max", "--oauth-issuer"}
"""No default of their own: --pool-max is --pool-min's (at least 1); without --oauth-issuer a
server has no OAuth policy at all (the other --oauth-* defaults are then the policy's)."""


def default_of(owner: type, name: str) -> Any:
    field = {f.name: f for f in dataclasses.fields(owner)}[name]
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def test_flags_variables_and_config_keys_are_unique() -> None:
    for attribute in ("flag", "env", "name"):
        values = [getattr(setting, attribute) for setting in SETTINGS]
        assert len(values) == len(set(values)), attribute
    keys = [setting.key for setting in PER_SERVER]
    assert len(keys) == len(set(keys))
    assert set(FLAG_KEYS) == {setting.flag for setting in PER_SERVER}


def test_every_setting_is_gateway_wide_per_server_or_an_input() -> None:
    for setting in SETTINGS:
        assert (setting.field is None) or (setting.key is None), setting.flag
        assert (setting.key is None) == (setting.target is None), setting.flag
    assert {s.flag for s in SETTINGS if s.field is None and s.key is None} == {"--config", "--command"}


@pytest.mark.parametrize("setting", PER_SERVER, ids=lambda s: s.flag)
def test_a_per_server_default_is_the_one_its_dataclass_uses(setting: Setting) -> None:
    assert setting.target is not None
    owner, _, name = setting.target.partition(".")
    used = default_of(OWNERS[owner], name)
    if setting.flag in WITHOUT_DEFAULT:
        return
    if setting.repeat:
        assert setting.default is None
        assert used in (None, (), {}), f"{setting.flag}: {used!r} when not given"
    else:
        declared = setting.converted(setting.default)
        assert used == declared, f"{setting.target} defaults to {used!r}, {setting.flag} to {setting.default!r}"


@pytest.mark.parametrize("setting", GATEWAY_WIDE, ids=lambda s: s.flag)
def test_a_gateway_wide_default_is_the_one_settings_uses(setting: Setting) -> None:
    assert setting.field is not None
    used = default_of(Settings, setting.field)
    if setting.negate:
        assert used is (not setting.default if setting.default is not None else True)
    elif setting.repeat:
        assert used == ()
    else:
        assert used == setting.default


def test_every_declared_default_passes_its_own_check() -> None:
    for setting in SETTINGS:
        assert setting.problem(setting.default) is None, setting.flag


def test_the_edge_defaults_are_the_gateway_s() -> None:
    assert Settings().edge() == EdgeSettings()


def test_the_command_line_with_nothing_given_is_settings_with_every_default() -> None:
    """The drift this module exists for: ChildSpec once had no request bound while the CLI had 3600 s."""
    assert parse_settings([], environ={}) == Settings()


def test_every_declared_setting_is_a_flag_and_nothing_else_is() -> None:
    parser = build_parser()
    flags = {o for a in parser._actions for o in a.option_strings if o.startswith("--")}  # test-only peek
    assert flags - {"--help", "--help-all", "--version"} == set(BY_FLAG)


def test_an_environment_variable_sets_each_kind_of_setting() -> None:
    environ = {
        "MCP_GATEWAY_PORT": "9100",
        "MCP_GATEWAY_NO_METRICS": "yes",
        "MCP_GATEWAY_CORS_ORIGIN": "https://a.example, https://b.example",
        "MCP_GATEWAY_REQUEST_TIMEOUT": "0",
    }
    settings = parse_settings([], environ=environ)
    assert (settings.port, settings.metrics, settings.cors_origins) == (
        9100,
        False,
        ("https://a.example", "https://b.example"),
    )
    assert settings.servers[0].spec.request_timeout is None  # 0 = no bound
    assert parse_settings(["--port", "9200"], environ=environ).port == 9200  # the flag wins


def test_a_gateway_wide_check_names_the_flag() -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings(["--workers", "0"], environ={})
    assert (info.value.key, info.value.message) == ("--workers", "--workers: must be between 1 and 64")


def test_a_choice_from_the_environment_is_checked_like_one_on_the_command_line() -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings([], environ={"MCP_GATEWAY_ISOLATION": "everyone"})
    assert info.value.message == "--isolation: must be shared, principal or session"


def test_a_per_server_number_or_choice_needs_no_code_of_its_own_in_the_config_file() -> None:
    plain = [s for s in PER_SERVER if s.key and "." not in s.key and not s.repeat]
    assert {s.key for s in plain} >= {"requestTimeout", "maxBatchSize", "isolation", "childAsks"}
    for setting in plain:
        assert setting.choices or setting.kind in (int, float, bool), setting.flag
