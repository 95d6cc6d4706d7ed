"""The log's redaction rules (gateway.protocol.redaction): secret names, and text by the same rule."""

from __future__ import annotations

import logging

import orjson
import pytest

from gateway.ops.logs import JsonFormatter
from gateway.protocol.redaction import REDACTED, is_secret, redact_text


@pytest.mark.parametrize(
    "name", ["token", "GITHUB_TOKEN", "api-key", "X-Api-Key", "apikey", "Authorization", "db_password"]
)
def test_a_name_with_a_secret_word_is_secret(name: str) -> None:
    assert is_secret(name)


@pytest.mark.parametrize("name", ["server", "pid", "line", "key", "path"])
def test_other_names_are_not(name: str) -> None:
    assert not is_secret(name)


@pytest.mark.parametrize(
    ("line", "redacted"),
    [
        ("API_KEY=sk-secret-123", f"API_KEY={REDACTED}"),
        ("starting with GITHUB_TOKEN=ghp_abc, port=8080", f"starting with GITHUB_TOKEN={REDACTED}, port=8080"),
        ("password: hunter2 user: bob", f"password: {REDACTED} user: bob"),
        ('{"api_key": "sk 1 2", "model": "x"}', f'{{"api_key": "{REDACTED}", "model": "x"}}'),
        ("config {'client_secret': 'abc'}", f"config {{'client_secret': '{REDACTED}'}}"),
        ("Authorization: Bearer eyJhbGciOi.x.y", f"Authorization: Bearer {REDACTED}"),
        ("authorization=Basic dXNlcjpwYXNz", f"authorization=Basic {REDACTED}"),
        ("sent header Bearer abc.def-ghi", f"sent header Bearer {REDACTED}"),
        ("fetching https://bob:pa55@example.com/x", f"fetching https://bob:{REDACTED}@example.com/x"),
        ("X-Api-Key: k1", f"X-Api-Key: {REDACTED}"),
        ("exited with code 2; stderr: TOKEN=abc123", f"exited with code 2; stderr: TOKEN={REDACTED}"),
        ("a=b password=c token: 'd e' f=g", f"a=b password={REDACTED} token: '{REDACTED}' f=g"),
    ],
)
def test_a_secret_value_in_text_is_redacted(line: str, redacted: str) -> None:
    assert redact_text(line) == redacted


@pytest.mark.parametrize(
    "line", ["listening on port 8080", "key=value path=/tmp", "https://example.com/a:b", "tokenizer loaded", ""]
)
def test_text_without_a_secret_is_left_as_it_is(line: str) -> None:
    assert redact_text(line) == line


def test_the_json_formatter_redacts_extra_fields_by_the_same_rule() -> None:
    record = logging.LogRecord("gateway", logging.INFO, __file__, 1, "m", (), None)
    record.__dict__.update({"api_key": "sk-1", "x_auth_token": "t", "server": "s"})
    out = orjson.loads(JsonFormatter().format(record))
    assert (out["api_key"], out["x_auth_token"], out["server"]) == (REDACTED, REDACTED, "s")
