"""``Setting``: how one setting is declared, and the checks and names the tables share.

See ``gateway.settings`` for what a declaration drives. Imports only the environment prefix
children are kept from inheriting (``gateway.stdio.spec``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gateway.stdio.spec import GATEWAY_ENV_PREFIX

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8000
DRAIN_TIMEOUT: Final = 20.0
"""Seconds in-flight requests get to finish after SIGTERM before they are cancelled."""
MAX_WORKERS: Final = 64
"""``--workers`` at most: one per core is the point, and each worker runs its own children."""
ENV_PREFIX: Final = GATEWAY_ENV_PREFIX  # one prefix: children never inherit these variables
CLIENT_CAPABILITIES: Final = (
    "sampling",
    "sampling.tools",
    "sampling.context",
    "elicitation",
    "elicitation.form",
    "elicitation.url",
    "roots",
    "roots.listChanged",
)
"""What ``--client-capability`` may declare to legacy children: the capabilities they can ask
for, and each sub-field the client capability schema gives them (2025-11-25). A sub-field
implies its capability; a capability named bare passes its clients' sub-fields as they
declare them (``gateway.protocol.inputs.told_to_child``)."""
NO_CAPABILITY: Final = "none"
"""``--client-capability none``: declare nothing (compliant children then never ask)."""

# --help sections; settings without one are listed first, under "options".
SCALE_OUT: Final = "scale-out (any replica, any request)"
POOL: Final = "pool and isolation"
SECURITY: Final = "security"
OAUTH_TLS: Final = "OAuth access tokens and TLS"
TASKS: Final = "tasks (the Tasks extension)"

Check = Callable[[Any], "str | None"]
"""A value's problem (the ``ConfigError`` message), or None when it is fine."""


def rule(ok: Callable[[Any], bool], problem: str) -> Check:
    """A check from a predicate; ``{value}`` in ``problem`` names the value."""
    return lambda value: None if ok(value) else problem.format(value=value)


AT_LEAST_ONE: Final = rule(lambda v: v >= 1, "must be at least 1")
NOT_NEGATIVE: Final = rule(lambda v: v >= 0, "must not be negative")


def either(choices: Sequence[str]) -> str:
    """``a, b or c``: how a check names the values allowed."""
    return f"{', '.join(choices[:-1])} or {choices[-1]}" if len(choices) > 1 else choices[0]


def env_name(flag: str) -> str:
    """``--pool-min`` ↔ ``MCP_GATEWAY_POOL_MIN``."""
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


@dataclass(frozen=True)
class Setting:
    """One setting. ``kind`` is the value's type (``bool``: a switch); ``repeat``: the flag
    may be given many times (a tuple of strings; comma-separated in the environment)."""

    flag: str
    help: str
    kind: type = str
    default: object = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    repeat: bool = False
    section: str = ""
    brief: bool = False  # shown in full by the short --help
    field: str | None = None  # gateway-wide: the gateway.config.Settings attribute
    negate: bool = False  # a switch that turns its field off (--no-metrics → metrics=False)
    key: str | None = None  # per server: the --config key ("pool.min", "requestTimeout")
    target: str | None = None  # per server: where it lands ("pool.min_size", "spec.request_timeout")
    check: Check | None = None
    convert: Callable[[Any], Any] | None = None  # per server: the parsed value → what the target holds
    dest: str | None = None  # the parsed name, when not the flag's

    @property
    def name(self) -> str:
        """The attribute argparse stores the value under."""
        return self.dest or self.flag.lstrip("-").replace("-", "_")

    @property
    def env(self) -> str:
        return env_name(self.flag)

    def converted(self, value: Any) -> Any:
        """What the ``target`` holds for the parsed ``value``."""
        return self.convert(value) if self.convert is not None else value

    def problem(self, value: object) -> str | None:
        """What is wrong with ``value`` (None for an unset optional one, which is fine)."""
        if self.check is None or value is None:
            return None
        return self.check(value)
