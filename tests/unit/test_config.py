"""Settings from flags, environment variables and the mcpServers config file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli import env_name, parse_settings
from gateway.config import demo_command
from gateway.errors import ConfigError
from gateway.protocol.attribution import AskPolicy
from gateway.protocol.keyring import MAX_STATE_KEYS
from gateway.relay.server_config import DualEra, Isolation

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_no_arguments_serve_the_demo_on_loopback() -> None:
    settings = parse_settings([], environ={})
    assert settings.is_demo
    assert settings.host == "127.0.0.1"
    assert settings.port == 8000
    assert settings.servers[0].spec.argv == list(demo_command())


def test_the_command_after_the_double_dash_is_taken_verbatim() -> None:
    settings = parse_settings(["--port", "9000", "--", "npx", "-y", "pkg", "--flag"], environ={})
    assert settings.servers[0].spec.argv == ["npx", "-y", "pkg", "--flag"]
    assert settings.port == 9000


def test_every_flag_has_an_environment_variable_and_flags_win() -> None:
    assert env_name("--pool-min") == "MCP_GATEWAY_POOL_MIN"
    environ = {
        "MCP_GATEWAY_PORT": "9100",
        "MCP_GATEWAY_POOL_MIN": "2",
        "MCP_GATEWAY_POOL_MAX": "5",
        "MCP_GATEWAY_ISOLATION": "principal",
        "MCP_GATEWAY_ALLOWED_ORIGIN": "https://a.example, https://b.example",
        "MCP_GATEWAY_NO_METRICS": "true",
        "MCP_GATEWAY_COMMAND": "npx -y '@scope/server name' --opt",
    }
    settings = parse_settings([], environ=environ)
    assert settings.port == 9100
    assert settings.servers[0].pool.min_size == 2
    assert settings.servers[0].pool.max_size == 5
    assert settings.servers[0].isolation is Isolation.PRINCIPAL
    assert settings.allowed_origins == ("https://a.example", "https://b.example")
    assert settings.metrics is False
    assert settings.servers[0].spec.argv == ["npx", "-y", "@scope/server name", "--opt"]
    assert parse_settings(["--port", "9200"], environ=environ).port == 9200


def write(tmp_path: Path, body: object) -> str:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps(body))
    return str(path)


def test_a_config_file_gives_each_server_its_own_settings(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        {
            "mcpServers": {
                "files": {"command": "npx", "args": ["-y", "fs", "/data"], "env": {"A": "1", "B": None}},
                "github": {
                    "command": "npx",
                    "args": ["-y", "gh"],
                    "isolation": "principal",
                    "envFromHeaders": {"X-GitHub-Token": "GITHUB_TOKEN"},
                    "pool": {"min": 0, "max": 8, "maxInFlight": 1},
                    "requestTimeout": 30,
                },
                "off": {"command": "nope", "disabled": True},
            }
        },
    )
    settings = parse_settings(["--config", config, "--pool-max", "3"], environ={})
    files, github = settings.servers
    assert (files.name, files.spec.argv, dict(files.spec.env)) == (
        "files",
        ["npx", "-y", "fs", "/data"],
        {"A": "1", "B": None},
    )
    assert files.pool.max_size == 3  # the command line's value, as a default
    assert github.isolation is Isolation.PRINCIPAL
    assert dict(github.env_from_headers) == {"x-github-token": "GITHUB_TOKEN"}
    assert (github.pool.min_size, github.pool.max_size, github.pool.max_in_flight) == (0, 8, 1)
    assert github.spec.request_timeout == 30.0


@pytest.mark.parametrize(
    ("body", "key"),
    [
        ({}, "mcpServers"),
        ({"mcpServers": {"x": {}}}, "mcpServers.x.command"),
        ({"mcpServers": {"x": {"command": "a", "args": "b"}}}, "mcpServers.x.args"),
        ({"mcpServers": {"x": {"command": "a", "pool": {"max": "2"}}}}, "mcpServers.x.pool.max"),
        ({"mcpServers": {"x": {"command": "a", "pool": {"min": 3, "max": 2}}}}, "mcpServers.x.pool"),
        ({"mcpServers": {"x": {"command": "a", "pool": {"maxInflight": 2}}}}, "mcpServers.x.pool.maxInflight"),
        ({"mcpServers": {"x": {"command": "a", "isolation": "tenant"}}}, "mcpServers.x.isolation"),
        ({"mcpServers": {"x": {"command": "a", "comand": "b"}}}, "mcpServers.x.comand"),
        ({"mcpServers": {"x": {"command": "a", "env": {"K": 1}}}}, "mcpServers.x.env.K"),
        ({"mcpServers": {"bad name": {"command": "a"}}}, "mcpServers.bad name"),
        ({"mcpServers": {"x": {"command": "a", "type": "http"}}}, "mcpServers.x.type"),
        ({"mcpServers": {"x": {"command": "a", "roots": "/data"}}}, "mcpServers.x.roots"),
        ({"mcpServers": {"x": {"command": "a", "roots": ["data"]}}}, "mcpServers.x.roots[0]"),
        ({"mcpServers": {"x": {"command": "a", "roots": [{"uri": "/d", "nam": "d"}]}}}, "mcpServers.x.roots[0].nam"),
        (
            {"mcpServers": {"x": {"command": "a", "clientCapabilities": {"roots": True}}}},
            "mcpServers.x.clientCapabilities.roots",
        ),
        ({"mcpServers": {"x": {"command": "a", "inputTimeout": "soon"}}}, "mcpServers.x.inputTimeout"),
        ({"mcpServers": {"x": {"command": "a", "maxBatchSize": 0}}}, "mcpServers.x.maxBatchSize"),
        ({"mcpServers": {"x": {"command": "a", "maxBatchSize": 2.5}}}, "mcpServers.x.maxBatchSize"),
        ({"mcpServers": {"x": {"command": "a", "readyRequired": "yes"}}}, "mcpServers.x.readyRequired"),
        ({"mcpServers": {"x": {"command": "a", "exposeChildErrors": 1}}}, "mcpServers.x.exposeChildErrors"),
        ({"mcpServers": {"x": {"command": "a", "rootsLearnWait": 61}}}, "mcpServers.x.rootsLearnWait"),
        ({"mcpServers": {"x": {"command": "a", "rootsLearnWait": -1}}}, "mcpServers.x.rootsLearnWait"),
    ],
)
def test_an_invalid_config_fails_at_start_naming_the_key(tmp_path: Path, body: object, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings(["--config", write(tmp_path, body)], environ={})
    assert info.value.key == key


def test_the_roots_learn_wait_is_set_per_server_by_flag_variable_or_config_key(tmp_path: Path) -> None:
    assert parse_settings(["--", "srv"], environ={}).servers[0].roots_learn_wait == 5.0
    assert parse_settings(["--roots-learn-wait", "0", "--", "srv"], environ={}).servers[0].roots_learn_wait == 0.0
    environ = {"MCP_GATEWAY_ROOTS_LEARN_WAIT": "12.5"}
    assert parse_settings(["--", "srv"], environ=environ).servers[0].roots_learn_wait == 12.5
    body = {"mcpServers": {"fs": {"command": "a", "rootsLearnWait": 20}, "memory": {"command": "b"}}}
    servers = parse_settings(["--config", write(tmp_path, body), "--roots-learn-wait", "1"], environ={}).servers
    assert {s.name: s.roots_learn_wait for s in servers} == {"fs": 20.0, "memory": 1.0}  # the flag: the default
    with pytest.raises(ConfigError) as info:
        parse_settings(["--roots-learn-wait", "90", "--", "srv"], environ={})
    assert info.value.message == "--roots-learn-wait: must be between 0 and 60 seconds"


def test_an_unreadable_or_malformed_file_is_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        parse_settings(["--config", str(tmp_path / "missing.json")], environ={})
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        parse_settings(["--config", str(broken)], environ={})


def test_a_config_file_and_a_command_together_are_refused(tmp_path: Path) -> None:
    config = write(tmp_path, {"mcpServers": {"x": {"command": "a"}}})
    with pytest.raises(ConfigError, match="either"):
        parse_settings(["--config", config, "--", "npx", "x"], environ={})


def test_the_example_servers_file_loads() -> None:
    settings = parse_settings(["--config", str(EXAMPLES / "servers.json")], environ={})
    names = {server.name for server in settings.servers}
    assert {"filesystem", "memory", "everything"} <= names


def test_every_client_capability_and_its_sub_fields_can_be_declared_from_the_command_line() -> None:
    flags = ["--client-capability", "roots.listChanged", "--client-capability", "elicitation.form"]
    flags += ["--client-capability", "sampling", "--client-capability", "sampling.tools"]
    [server] = parse_settings([*flags, "--", "srv"], environ={}).servers
    assert dict(server.spec.client_capabilities) == {
        "roots": {"listChanged": True},  # a boolean in the schema
        "elicitation": {"form": {}},
        "sampling": {"tools": {}},
    }
    environ = {"MCP_GATEWAY_CLIENT_CAPABILITY": "elicitation.url,sampling.context"}
    [from_env] = parse_settings(["--", "srv"], environ=environ).servers
    assert dict(from_env.spec.client_capabilities) == {"elicitation": {"url": {}}, "sampling": {"context": {}}}
    with pytest.raises(ConfigError, match="is not one of"):
        parse_settings(["--", "srv"], environ={"MCP_GATEWAY_CLIENT_CAPABILITY": "roots.telepathy"})


def test_client_capabilities_roots_and_the_input_timeout_come_from_flags_and_the_file(tmp_path: Path) -> None:
    flags = ["--client-capability", "sampling", "--root", "/srv/data", "--input-timeout", "45"]
    [server] = parse_settings([*flags, "--", "srv"], environ={}).servers
    assert dict(server.spec.client_capabilities) == {"sampling": {}}
    assert server.spec.roots == ({"uri": "file:///srv/data"},)
    assert server.spec.declared_capabilities == {"sampling": {}, "roots": {}}  # roots configured: declared
    assert server.spec.input_timeout == 45.0
    [bare] = parse_settings(["--", "srv"], environ={}).servers
    # By default a legacy child is told everything the gateway can bridge to a client.
    assert (bare.spec.declared_capabilities, bare.spec.roots) == (
        {"sampling": {}, "elicitation": {}, "roots": {}},
        None,
    )
    [none] = parse_settings(["--client-capability", "none", "--", "srv"], environ={}).servers
    assert none.spec.declared_capabilities == {}
    with pytest.raises(ConfigError, match="cannot be combined"):
        parse_settings(["--client-capability", "none", "--client-capability", "roots", "--", "srv"], environ={})
    with pytest.raises(ConfigError, match="is not one of"):
        parse_settings(["--", "srv"], environ={"MCP_GATEWAY_CLIENT_CAPABILITY": "telepathy"})
    environ = {"MCP_GATEWAY_CLIENT_CAPABILITY": "sampling,elicitation", "MCP_GATEWAY_ROOT": "file:///a,/b"}
    [from_env] = parse_settings(["--", "srv"], environ=environ).servers
    assert dict(from_env.spec.client_capabilities) == {"sampling": {}, "elicitation": {}}
    assert from_env.spec.roots == ({"uri": "file:///a"}, {"uri": "file:///b"})
    config = write(
        tmp_path,
        {
            "mcpServers": {
                "x": {
                    "command": "a",
                    "clientCapabilities": {"elicitation": {"form": {}}},
                    "roots": ["/data", {"uri": "file:///work", "name": "work"}],
                    "inputTimeout": 5,
                }
            }
        },
    )
    [configured] = parse_settings(["--config", config], environ={}).servers
    assert dict(configured.spec.client_capabilities) == {"elicitation": {"form": {}}}
    assert configured.spec.roots == ({"uri": "file:///data"}, {"uri": "file:///work", "name": "work"})
    assert configured.spec.input_timeout == 5.0
    narrowed = write(
        tmp_path,
        {
            "mcpServers": {
                "a": {"command": "a", "clientCapabilities": "none"},
                "b": {"command": "b", "clientCapabilities": {}},
            }
        },
    )
    assert [s.spec.declared_capabilities for s in parse_settings(["--config", narrowed], environ={}).servers] == [
        {},
        {},
    ]


def test_whether_requests_that_may_ask_get_a_child_each_comes_from_a_flag_or_the_file(tmp_path: Path) -> None:
    [default] = parse_settings(["--", "srv"], environ={}).servers
    assert default.pool.child_asks is AskPolicy.AUTO
    [never] = parse_settings(["--child-asks", "never", "--", "srv"], environ={}).servers
    assert never.pool.child_asks is AskPolicy.NEVER
    config = write(tmp_path, {"mcpServers": {"x": {"command": "a", "childAsks": "always"}}})
    [configured] = parse_settings(["--config", config], environ={}).servers
    assert configured.pool.child_asks is AskPolicy.ALWAYS
    bad = write(tmp_path, {"mcpServers": {"x": {"command": "a", "childAsks": "sometimes"}}})
    with pytest.raises(ConfigError, match="childAsks"):
        parse_settings(["--config", bad], environ={})


def test_the_state_secret_file_is_a_keyring_checked_at_start(tmp_path: Path) -> None:
    assert parse_settings([], environ={}).state_keys() is None
    key = tmp_path / "state.key"
    key.write_bytes(b"0123456789abcdef0123456789abcdef\n")
    environ = {"MCP_GATEWAY_STATE_SECRET_FILE": str(key)}
    keys = parse_settings([], environ=environ).state_keys()
    assert keys is not None
    assert keys.ring.keys == (b"0123456789abcdef0123456789abcdef",)  # one key on one line: as before
    assert keys.path == str(key)
    key.write_bytes(b"# the current key first\n" + b"n" * 32 + b"\n\n" + b"o" * 32 + b"\n")
    keys = parse_settings([], environ=environ).state_keys()
    assert keys is not None
    assert keys.ring.keys == (b"n" * 32, b"o" * 32)
    key.write_bytes(b"short")
    with pytest.raises(ConfigError, match="line 1: a key needs at least 16 bytes"):
        parse_settings([], environ=environ).state_keys()
    key.write_bytes(b"\n".join(bytes([65 + n]) * 16 for n in range(MAX_STATE_KEYS + 1)))
    with pytest.raises(ConfigError, match=f"holds {MAX_STATE_KEYS + 1} keys; at most {MAX_STATE_KEYS}"):
        parse_settings([], environ=environ).state_keys()
    with pytest.raises(ConfigError, match="cannot read"):
        parse_settings(["--state-secret-file", str(tmp_path / "missing")], environ={}).state_keys()


@pytest.mark.parametrize(
    "argv",
    [
        ["--auth-token", "short"],
        ["--principal-header", "X-User", "--trusted-proxy", "not-an-address"],
        ["--auth-token-file", "/nonexistent/tokens"],
        ["--pool-min", "3", "--pool-max", "2"],
    ],
)
def test_bad_settings_exit_2_with_a_message_before_anything_starts(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from gateway.cli import main

    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("mcp-stdio-gateway: ")


def test_the_batch_size_comes_from_the_flag_the_environment_or_the_file(tmp_path: Path) -> None:
    assert parse_settings([], environ={}).servers[0].max_batch_size == 64
    assert parse_settings(["--max-batch-size", "8"], environ={}).servers[0].max_batch_size == 8
    assert parse_settings([], environ={"MCP_GATEWAY_MAX_BATCH_SIZE": "9"}).servers[0].max_batch_size == 9
    body = {"mcpServers": {"a": {"command": "x", "maxBatchSize": 3}, "b": {"command": "y"}}}
    servers = parse_settings(["--max-batch-size", "7", "--config", write(tmp_path, body)], environ={}).servers
    assert [server.max_batch_size for server in servers] == [3, 7]
    with pytest.raises(ConfigError) as info:
        parse_settings(["--max-batch-size", "0"], environ={})
    assert info.value.key == "--max-batch-size"


def test_advertise_url_needs_the_shared_secret_and_excludes_workers(tmp_path: Path) -> None:
    from gateway.config import Settings

    secret = tmp_path / "secret"
    secret.write_bytes(b"x" * 32)
    with pytest.raises(ConfigError, match="needs --state-secret-file"):
        Settings(advertise_url="http://10.0.0.7:8000")
    with pytest.raises(ConfigError, match="not both"):
        Settings(advertise_url="http://10.0.0.7:8000", workers=2, state_secret_file=str(secret))
    for bad in ("10.0.0.7:8000", "ftp://x", "http://", "http://x/mcp"):
        with pytest.raises(ConfigError, match="not a base URL"):
            Settings(advertise_url=bad, state_secret_file=str(secret))
    assert Settings(advertise_url="http://10.0.0.7:8000/", state_secret_file=str(secret)).workers == 1


def test_workers_are_bounded() -> None:
    from gateway.config import MAX_WORKERS, Settings

    with pytest.raises(ConfigError, match="workers"):
        Settings(workers=0)
    with pytest.raises(ConfigError, match="workers"):
        Settings(workers=MAX_WORKERS + 1)


def test_advertise_url_auto_is_this_hosts_address_and_refuses_loopback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    from gateway.config import Settings

    secret = tmp_path / "secret"
    secret.write_bytes(b"x" * 32)
    settings = Settings(advertise_url="auto", state_secret_file=str(secret), port=8000)
    monkeypatch.setattr(socket, "gethostbyname", lambda name: "10.1.2.3")
    assert settings.own_advertise_url() == "http://10.1.2.3:8000"
    monkeypatch.setattr(socket, "gethostbyname", lambda name: "127.0.1.1")
    with pytest.raises(ConfigError, match="cannot reach; give a URL"):
        settings.own_advertise_url()


def test_the_era_of_children_for_a_dual_server_comes_from_a_flag_or_the_file(tmp_path: Path) -> None:
    [default] = parse_settings(["--", "srv"], environ={}).servers
    assert default.dual_era is DualEra.PER_CLIENT
    [modern] = parse_settings(["--dual-era", "modern", "--", "srv"], environ={}).servers
    assert modern.dual_era is DualEra.MODERN
    config = write(tmp_path, {"mcpServers": {"x": {"command": "a", "dualEra": "legacy"}}})
    [configured] = parse_settings(["--config", config], environ={}).servers
    assert configured.dual_era is DualEra.LEGACY
    bad = write(tmp_path, {"mcpServers": {"x": {"command": "a", "dualEra": "both"}}})
    with pytest.raises(ConfigError, match="dualEra"):
        parse_settings(["--config", bad], environ={})


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--tls-cert-file", "/c.pem"], "--tls-cert-file"),
        (["--tls-client-ca-file", "/ca.pem"], "--tls-client-ca-file"),
        (["--trusted-proxy", "10.0.0.1"], "--trusted-proxy"),
        (["--advertise-url", "nope"], "--advertise-url"),
        (["--oauth-issuer", "http://issuer.example"], "--oauth-issuer"),
        (["--oauth-issuer", "https://issuer.example", "--oauth-jwks-url", "ftp://x"], "--oauth-jwks-url"),
        (["--oauth-issuer", "https://issuer.example", "--oauth-scope", "two words"], "--oauth-scope"),
        (["--pool-min", "3", "--pool-max", "2"], "--pool-min/--pool-max"),
    ],
)
def test_start_up_errors_name_the_flag_not_the_field(argv: list[str], flag: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings(argv, environ={})
    assert info.value.message.startswith(f"{flag}: "), info.value.message


def test_an_oauth_endpoint_without_an_audience_names_the_flag() -> None:
    from gateway import server

    settings = parse_settings(["--oauth-issuer", "https://issuer.example"], environ={})
    with pytest.raises(ConfigError, match=r"^--oauth-audience: needs --public-url or --oauth-audience"):
        server.build_app(settings)


def test_the_servers_readiness_requires_come_from_the_flag_the_environment_or_the_file(tmp_path: Path) -> None:
    servers = {name: {"command": "a"} for name in ("files", "github", "time", "search")}
    servers["search"]["readyRequired"] = True
    config = write(tmp_path, {"mcpServers": servers})

    def required(argv: list[str], environ: dict[str, str] | None = None) -> list[str]:
        settings = parse_settings(["--config", config, *argv], environ=environ or {})
        return [server.name for server in settings.servers if server.ready_required]

    assert required([]) == ["search"]  # the file's own
    assert required(["--ready-requires", "files", "--ready-requires", "time"]) == ["files", "time", "search"]
    assert required(["--ready-requires", "files, github"]) == ["files", "github", "search"]  # comma-separated
    assert required([], {env_name("--ready-requires"): "github,time"}) == ["github", "time", "search"]
    single = parse_settings(["--ready-requires", "default", "--", "npx", "x"], environ={})
    assert single.servers[0].ready_required  # the command line's one server is named "default"
    assert not parse_settings(["--", "npx", "x"], environ={}).servers[0].ready_required  # (required anyway: alone)


def test_an_unknown_server_in_ready_requires_is_refused_naming_the_servers(tmp_path: Path) -> None:
    config = write(tmp_path, {"mcpServers": {"files": {"command": "a"}, "github": {"command": "b"}}})
    with pytest.raises(ConfigError) as info:
        parse_settings(["--config", config, "--ready-requires", "files,gihtub"], environ={})
    assert info.value.key == "--ready-requires"
    assert info.value.message == "--ready-requires: 'gihtub' is not a configured server (servers: files, github)"
    with pytest.raises(ConfigError, match="'default' is not a configured server"):
        parse_settings(["--config", config, "--ready-requires", "default"], environ={})


def test_child_stderr_logging_is_on_by_default_and_turned_off_by_flag_environment_or_file(tmp_path: Path) -> None:
    assert parse_settings(["--", "srv"], environ={}).servers[0].spec.stderr_log is True
    assert parse_settings(["--child-stderr-log", "off", "--", "srv"], environ={}).servers[0].spec.stderr_log is False
    off = {"MCP_GATEWAY_CHILD_STDERR_LOG": "off"}
    assert parse_settings(["--", "srv"], environ=off).servers[0].spec.stderr_log is False
    with pytest.raises(ConfigError, match="--child-stderr-log"):
        parse_settings(["--", "srv"], environ={"MCP_GATEWAY_CHILD_STDERR_LOG": "no"})
    path = write(
        tmp_path, {"mcpServers": {"chatty": {"command": "a", "childStderrLog": "off"}, "quiet": {"command": "b"}}}
    )
    servers = {s.name: s for s in parse_settings(["--config", path], environ={}).servers}
    assert (servers["chatty"].spec.stderr_log, servers["quiet"].spec.stderr_log) == (False, True)
    bad = write(tmp_path, {"mcpServers": {"chatty": {"command": "a", "childStderrLog": False}}})
    with pytest.raises(ConfigError, match="childStderrLog"):
        parse_settings(["--config", bad], environ={})


def test_child_errors_reach_clients_only_when_the_flag_the_variable_or_the_config_key_says_so(
    tmp_path: Path,
) -> None:
    assert parse_settings(["--", "srv"], environ={}).servers[0].spec.expose_errors is False
    assert parse_settings(["--expose-child-errors", "--", "srv"], environ={}).servers[0].spec.expose_errors
    environ = {"MCP_GATEWAY_EXPOSE_CHILD_ERRORS": "1"}
    assert parse_settings(["--", "srv"], environ=environ).servers[0].spec.expose_errors
    body = {"mcpServers": {"dev": {"command": "a", "exposeChildErrors": True}, "prod": {"command": "b"}}}
    dev, prod = parse_settings(["--config", write(tmp_path, body)], environ={}).servers
    assert (dev.spec.expose_errors, prod.spec.expose_errors) == (True, False)
    dev, prod = parse_settings(["--expose-child-errors", "--config", write(tmp_path, body)], environ={}).servers
    assert (dev.spec.expose_errors, prod.spec.expose_errors) == (True, True)  # the flag is every server's default
