"""From a per-server setting's command-line value (what argparse or the environment gave) to
what its ``target`` holds. Each raises ``ConfigError`` naming the flag.

A declaration names one of these as its ``convert``; ``gateway.cli.server_config`` applies
it, and ``gateway.configfile`` too for the values a ``--config`` file gives in the same form
(numbers and choices). Imports ``gateway.errors``, ``gateway.protocol`` and the enums.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.errors import ConfigError
from gateway.protocol.roots import parse_root
from gateway.settings.declaration import CLIENT_CAPABILITIES, NO_CAPABILITY


def no_bound_at_zero(value: float) -> float | None:
    """``--request-timeout 0`` / ``requestTimeout: 0``: no time bound (None)."""
    return value or None


def client_capabilities(names: Sequence[str]) -> dict[str, object] | None:
    """``--client-capability`` values → the capabilities declared to legacy children; None
    (not given): every one the gateway can bridge; ``none``: nothing. ``NAME.SUB`` declares a
    sub-field (``roots.listChanged`` is ``true``, the others ``{}``) and implies ``NAME``."""
    known = (*CLIENT_CAPABILITIES, NO_CAPABILITY)
    for name in names:  # argparse checks choices on the command line, not in environment values
        if name not in known:
            raise ConfigError("--client-capability", f"{name!r} is not one of {', '.join(known)}")
    if NO_CAPABILITY in names and len(set(names)) > 1:
        raise ConfigError("--client-capability", "'none' cannot be combined with a capability")
    if not names:
        return None
    declared: dict[str, dict[str, object]] = {}
    for name in names:
        if name == NO_CAPABILITY:
            continue
        capability, _, sub = name.partition(".")
        fields = declared.setdefault(capability, {})
        if sub:
            fields[sub] = True if sub == "listChanged" else {}
    return dict(declared)


def roots(items: Sequence[str]) -> tuple[dict[str, str], ...] | None:
    """``--root`` values → the roots the gateway answers a child's ``roots/list`` with."""
    return tuple(parse_root(item, "--root") for item in items) or None


def env_mappings(items: Sequence[str]) -> dict[str, str]:
    """``--env-from-header HEADER=ENV`` values → lower-case header → variable."""
    mappings: dict[str, str] = {}
    for item in items:
        header, sep, env = item.partition("=")
        if not sep or not header.strip() or not env.strip():
            raise ConfigError("--env-from-header", f"{item!r} is not HEADER=ENV_VAR")
        mappings[header.strip().lower()] = env.strip()
    return mappings


def on_off(value: str) -> bool:
    """``on`` / ``off`` (a choice: argparse and the config file check it first) → a switch."""
    return value == "on"


def strings(items: Sequence[str]) -> tuple[str, ...]:
    return tuple(items)
