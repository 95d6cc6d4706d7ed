"""``--tracing`` and the ``OTEL_*`` variables: when tracing is on, and what off costs.

Off (the default, with no ``OTEL_*`` variable set) imports nothing of OpenTelemetry, on the
whole serving path: a request served by ``server.build_app``'s app in a fresh interpreter
(only a new process starts with an empty ``sys.modules``). Asked for without the ``otel``
extra, the gateway refuses to start and names the extra.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway import cli
from gateway.errors import ConfigError
from gateway.ops import tracing
from gateway.ops.tracing import open_tracer, tracing_wanted
from gateway.protocol.bridge import own_trace
from gateway.settings import running
from tests.logrecords import recording

REPO_ROOT = Path(__file__).resolve().parents[2]
ENDPOINT = "http://collector:4318"


@pytest.mark.parametrize(
    ("choice", "environ", "why"),
    [
        ("auto", {}, None),
        ("auto", {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ("auto", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ENDPOINT}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        ("auto", {"OTEL_TRACES_EXPORTER": "otlp"}, "OTEL_TRACES_EXPORTER=otlp"),
        ("auto", {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, None),
        ("auto", {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, None),
        (
            "auto",
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_TRACES_EXPORTER": "otlp"},
            "OTEL_TRACES_EXPORTER=otlp",
        ),
        ("otlp", {}, "--tracing otlp"),
        ("otlp", {"OTEL_TRACES_EXPORTER": "none"}, "--tracing otlp"),
        ("off", {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, None),
        ("off", {"OTEL_TRACES_EXPORTER": "zipkin"}, None),
    ],
)
def test_tracing_is_on_only_when_the_flag_or_the_otel_variables_ask(
    choice: str, environ: dict[str, str], why: str | None
) -> None:
    assert tracing_wanted(choice, environ) == why


@pytest.mark.parametrize(
    ("choice", "environ", "named"),
    [
        ("auto", {"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
        (
            "auto",
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
        ("otlp", {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
        ("otlp", {"OTEL_SDK_DISABLED": "true"}, "--tracing"),
    ],
)
def test_what_the_exporter_cannot_do_is_refused_naming_the_variable(
    choice: str, environ: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        tracing_wanted(choice, environ)
    assert refused.value.message.startswith(named)


def test_the_flags_choices_are_the_tracers() -> None:
    assert running.TRACING_CHOICES == tracing.TRACING_CHOICES


def without_opentelemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the ``otel`` extra were not installed."""
    import gateway.ops

    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # an import of it raises ImportError
    monkeypatch.delitem(sys.modules, "gateway.ops.otel", raising=False)
    monkeypatch.delattr(gateway.ops, "otel", raising=False)


def test_tracing_asked_for_without_the_extra_is_a_start_up_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    without_opentelemetry(monkeypatch)
    with pytest.raises(ConfigError) as refused:
        open_tracer("auto", {"OTEL_TRACES_EXPORTER": "otlp"}, "0")
    assert "OTEL_TRACES_EXPORTER=otlp" in refused.value.message
    assert tracing.EXTRA in refused.value.message
    assert open_tracer("auto", {}, "0") is None  # off: the missing extra does not matter
    # From the command line: refused before anything is bound (exit 2, the reason on stderr).
    for name in [name for name in os.environ if name.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    assert cli.main(["--tracing", "otlp", "--port", "0"]) == 2
    assert "pip install 'mcp-stdio-gateway[otel]'" in capsys.readouterr().err


def test_an_endpoint_set_for_the_whole_pod_without_the_extra_is_only_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    without_opentelemetry(monkeypatch)
    with recording("gateway") as records:
        assert open_tracer("auto", {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, "0") is None
    [warning] = [record.getMessage() for record in records.records if record.levelno == logging.WARNING]
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in warning
    assert tracing.EXTRA in warning


SERVE_ONE_CALL = """
import sys

import anyio
import httpx

from gateway.config import Settings
from gateway.relay.server_config import ServerConfig
from gateway.server import build_app
from tests.component.fakechild import fake_backend
from tests.component.harness import FAKE_SPEC, lifespan
from tests.gateway_server import modern_call, modern_headers


async def main() -> None:
    async with fake_backend() as backend:
        settings = Settings(servers=(ServerConfig("test", FAKE_SPEC),), tracing=sys.argv[1])
        app = build_app(settings, backend=backend)
        transport = httpx.ASGITransport(app=app)
        async with lifespan(app), httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            headers = modern_headers("tools/call", "echo", traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01")
            reply = await http.post("/mcp", headers=headers, json=modern_call(1, "echo", {"message": "x"}))
            assert reply.json()["result"]["content"][0]["text"] == "x", reply.text
    print(" ".join(sorted(name for name in sys.modules if name.startswith("opentelemetry"))))


anyio.run(main)
"""


def opentelemetry_modules_after_a_call(tracing_choice: str, **environ: str) -> set[str]:
    """The ``opentelemetry`` modules a fresh gateway process has imported once it served a call."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", SERVE_ONE_CALL, tracing_choice],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**env, **environ},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return set(done.stdout.split())


def test_tracing_off_imports_nothing_of_opentelemetry_on_the_serving_path() -> None:
    assert opentelemetry_modules_after_a_call("auto") == set()


def test_tracing_on_serves_through_the_sdk() -> None:
    pytest.importorskip("opentelemetry.sdk")
    # Sampled out: the SDK and the exporter are loaded and on the path, and nothing is sent.
    modules = opentelemetry_modules_after_a_call("auto", OTEL_TRACES_EXPORTER="otlp", OTEL_TRACES_SAMPLER="always_off")
    assert {"opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter"} <= modules


def test_the_dev_extra_carries_the_otel_extra_so_ci_runs_the_tracing_tests() -> None:
    import tomllib

    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras["otel"]) <= set(extras["dev"])


@pytest.mark.parametrize(
    ("params", "meta"),
    [
        (None, {"traceparent": "ours"}),
        ({"name": "t"}, {"traceparent": "ours"}),
        (
            {"_meta": {"traceparent": "theirs", "tracestate": "a=1", "progressToken": 3}},
            {"progressToken": 3, "traceparent": "ours"},
        ),
    ],
)
def test_the_childs_trace_context_is_the_gateways_span_never_merged_with_the_clients(
    params: dict[str, object] | None, meta: dict[str, object]
) -> None:
    out = own_trace(params, {"traceparent": "ours"})
    assert out is not None
    assert out["_meta"] == meta
    assert params is None or params.get("_meta") != meta  # the client's params are left as they were
