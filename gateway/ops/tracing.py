"""OpenTelemetry tracing, optional: whether it is on, and the tracer the HTTP edge calls.

Off unless asked for. ``--tracing`` (``MCP_GATEWAY_TRACING``) says ``otlp`` (on), ``off``, or
``auto`` (the default), which follows the standard variables: on when ``OTEL_TRACES_EXPORTER``
says ``otlp`` or, with it unset, when an OTLP endpoint is given (``OTEL_EXPORTER_OTLP_ENDPOINT``
or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); off with ``OTEL_TRACES_EXPORTER=none``,
``OTEL_SDK_DISABLED=true`` or nothing set. The exporter is OTLP over HTTP (protobuf), set up
by the SDK from the other ``OTEL_*`` variables (headers, timeout, certificates, the batch
processor's ``OTEL_BSP_*``, the sampler).

This module imports nothing of OpenTelemetry: when tracing is off nothing of it is imported
at all (``tests/unit/test_tracing_off.py``), and the request path pays one ``is None`` test
per place a span would start. ``open_tracer`` imports ``gateway.ops.otel`` (the SDK) when
tracing is on; a missing extra is a ``ConfigError`` at start-up when tracing was asked for
(``--tracing otlp``, ``OTEL_TRACES_EXPORTER=otlp``), and a warning when only an endpoint
variable turned it on (one set for the whole pod must not stop a gateway never told to trace).

A ``Tracer`` lives as long as the app: its ``running()`` (entered by the app's lifespan)
starts the SDK's provider and, at exit, shuts it down, which exports what is still batched.
``request(scope)`` gives a ``RequestTrace`` for one MCP request, which the relay's spans hang
under (``gateway.relay.spans``) and which the edge ends with the answer (``finish``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping
from contextlib import AbstractContextManager
from typing import Any, Final, Protocol

from gateway.errors import ConfigError
from gateway.relay.spans import RequestSpan

log = logging.getLogger("gateway")

TRACING_FLAG: Final = "--tracing"
TRACING_CHOICES: Final = ("auto", "otlp", "off")
EXTRA: Final = "pip install 'mcp-stdio-gateway[otel]'"
"""What installs the SDK and the OTLP exporter (``pyproject.toml``'s ``otel`` extra)."""
ENDPOINT_VARIABLES: Final = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOL_VARIABLES: Final = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
EXPORTED_PROTOCOL: Final = "http/protobuf"
"""The one OTLP protocol the exporter speaks (the gRPC one would bring grpcio, far heavier)."""


class RequestTrace(RequestSpan, Protocol):
    def finish(self, server: str, status: int, outcome: str, code: int | None) -> str:
        """End the request's span with its answer; its trace id (32 hex digits) for the access line."""


class Tracer(Protocol):
    def running(self) -> AbstractContextManager[None]:
        """Spans are made and exported inside; at exit the provider is shut down (flushed)."""

    def request(self, scope: MutableMapping[str, Any]) -> RequestTrace | None:
        """The trace of the MCP request ``scope`` is (None outside ``running``)."""


def _enabled(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def tracing_wanted(choice: str, environ: Mapping[str, str]) -> str | None:
    """Why tracing is on (``choice`` and the ``OTEL_*`` variables in ``environ``), or None: off.
    ``ConfigError`` when they ask for what the gateway cannot do."""
    if choice == "off":
        return None
    if _enabled(environ.get("OTEL_SDK_DISABLED")):
        if choice == "otlp":
            raise ConfigError(TRACING_FLAG, "otlp, but OTEL_SDK_DISABLED=true turns OpenTelemetry off: unset one")
        return None
    exporters = {name.strip().lower() for name in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if name.strip()}
    if exporters - {"otlp", "none"}:
        shown = ", ".join(sorted(exporters - {"otlp", "none"}))
        raise ConfigError("OTEL_TRACES_EXPORTER", f"{shown}: the gateway exports traces with otlp only (or none)")
    why: str | None
    if choice == "otlp":
        why = TRACING_FLAG + " otlp"
    elif "none" in exporters:
        return None
    elif exporters:
        why = "OTEL_TRACES_EXPORTER=otlp"
    else:
        why = next((name for name in ENDPOINT_VARIABLES if environ.get(name)), None)
        if why is None:
            return None
    for name in PROTOCOL_VARIABLES:
        protocol = environ.get(name)
        if protocol and protocol.strip() != EXPORTED_PROTOCOL:
            raise ConfigError(name, f"{protocol}: the gateway exports OTLP over {EXPORTED_PROTOCOL} only")
        if protocol:
            break  # the traces' own variable wins over the general one
    return why


def open_tracer(choice: str, environ: Mapping[str, str], version: str) -> Tracer | None:
    """The gateway's tracer (OTLP over HTTP), or None when tracing is off; ``ConfigError``
    when it is asked for and the ``otel`` extra is not installed."""
    why = tracing_wanted(choice, environ)
    if why is None:
        return None
    try:
        from gateway.ops import otel
    except ImportError as exc:
        problem = f"tracing is on ({why}) but OpenTelemetry is not installed (no module {exc.name or exc}): {EXTRA}"
        if why in ENDPOINT_VARIABLES:
            # An endpoint alone may be set for the whole pod (for other programs, or metrics):
            # it does not stop a gateway that was never told to trace.
            log.warning("%s; serving without tracing (--tracing off silences this)", problem)
            return None
        raise ConfigError(TRACING_FLAG, problem) from exc
    return otel.otlp_tracer(version)
