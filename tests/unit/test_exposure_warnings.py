"""What the gateway warns about at start (``gateway.server.exposure_warnings``): a credential
that crosses plain HTTP, and the shipped placeholder tokens, operator token and state secret
still in use."""

from __future__ import annotations

from pathlib import Path

from gateway.cli import parse_settings
from gateway.server import exposure_warnings

PLACEHOLDER_SECRET = "change-me-yLLhqOz4VH4Vy5coHoAkRdlTmX9z5QTI7p9OCIfSvC8\n"


def test_behind_a_proxy_that_sends_a_principal_header_plain_http_is_not_warned_about(tmp_path: Path) -> None:
    # The compose shape: nginx keeps the tokens and forwards X-Forwarded-User; no credential
    # reaches the gateway, so plain HTTP between the two carries none.
    settings = parse_settings(
        ["--host", "0.0.0.0", "--principal-header", "X-Forwarded-User", "--trusted-proxy", "10.0.0.10"], environ={}
    )
    assert exposure_warnings(settings) == []


def test_bearer_tokens_over_plain_http_off_loopback_are_warned_about(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("alice:3f9c8e2a7b\n")
    exposed = parse_settings(["--host", "0.0.0.0", "--auth-token-file", str(tokens)], environ={})
    (warning,) = exposure_warnings(exposed)
    assert warning.startswith("plain HTTP on 0.0.0.0: bearer tokens cross the network in clear")
    on_loopback = parse_settings(["--auth-token-file", str(tokens)], environ={})
    assert exposure_warnings(on_loopback) == []


def test_the_shipped_demo_tokens_and_placeholder_state_secret_are_warned_about_loudly(tmp_path: Path) -> None:
    tokens, secret = tmp_path / "tokens", tmp_path / "state-secret"
    tokens.write_text("alice:demo-alice-change-me\nbob:a71e55d0c4\ncarol:DEMO-CAROL-CHANGE-ME\n")
    secret.write_text(PLACEHOLDER_SECRET)
    settings = parse_settings(["--auth-token-file", str(tokens), "--state-secret-file", str(secret)], environ={})
    demo_tokens, placeholder_secret = exposure_warnings(settings)
    assert demo_tokens.startswith("DEMO TOKENS IN USE: 2 bearer token(s)")
    assert placeholder_secret.startswith(f"PLACEHOLDER STATE SECRET IN USE: {secret}")
    secret.write_text("9d1f0c3e5b7a2d4f6e8c0b1a3d5f7e9c2b4d6f8a0c1e3b5d\n")
    tokens.write_text("alice:3f9c8e2a7b\n")
    assert exposure_warnings(settings) == []


def test_the_compose_files_placeholder_is_the_one_recognised() -> None:
    shipped = Path(__file__).resolve().parents[2] / "deploy/compose/state-secret.conf"
    settings = parse_settings(["--state-secret-file", str(shipped)], environ={})
    assert [w.split(":")[0] for w in exposure_warnings(settings)] == ["PLACEHOLDER STATE SECRET IN USE"]


def test_the_compose_files_placeholder_operator_token_is_warned_about() -> None:
    shipped = Path(__file__).resolve().parents[2] / "deploy/compose/operator-token.conf"
    settings = parse_settings(["--operator-token-file", str(shipped)], environ={})
    (warning,) = exposure_warnings(settings)
    assert warning.startswith("PLACEHOLDER OPERATOR TOKEN IN USE: 1 operator token(s) contain 'change-me'")
    assert exposure_warnings(parse_settings(["--operator-token", "4e1d9a7c3b5f2e8d0a6c"], environ={})) == []
