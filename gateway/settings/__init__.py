"""Every setting of the gateway, declared once: the single source of its flag, environment
variable, config-file key, default, help text, ``--help`` section, check and conversion.

The command line (``gateway.cli.build_parser``), the ``MCP_GATEWAY_*`` environment variables
(``gateway.cli.environment_defaults``), the command line's server (``gateway.cli.server_config``),
the per-server keys of a ``--config`` file (``gateway.configfile``), the checks of
``gateway.config.Settings`` and the reference in docs/configuration.md (``gateway.reference``)
are all read from ``SETTINGS``. The tables (``serving``, ``pools``, ``running``, ``access``)
hold the declarations in ``--help-all`` order (and ``tasks``); ``declaration`` defines ``Setting`` and the
checks; ``convert`` turns a per-server value into what its target holds.

A setting is one of three kinds:

- **gateway-wide** (``field``): an attribute of ``gateway.config.Settings``;
- **per server** (``key`` and ``target``): the ``--config`` key a server entry may override it
  with, and where it lands in that server's ``ServerConfig`` (``spec.*``: its ``ChildSpec``,
  ``pool.*``: its ``PoolSettings``, ``oauth.*``: its ``OAuthPolicy``, ``server.*``: the
  ``ServerConfig`` itself);
- **an input** (neither): ``--config`` and ``--command``, which say what to serve.

Defaults are the named limits of the module that owns each (``gateway.stdio.spec``,
``gateway.http.edge_settings``, ``gateway.relay.server_config``, …), so the reason for a
number stays next to the value it bounds;
``tests/unit/test_settings.py`` checks that every dataclass default equals the declared one.
To add a setting: declare it here, give the dataclass named by ``field``/``target`` the
field, and use it (docs/architecture.md, "Adding a setting").

Imports the constants it names and nothing that imports it back, and only from light modules:
no Starlette, uvicorn, httpx, router or pool, so ``--help`` loads no server
(``tests/unit/test_cli_imports.py``).
"""

from __future__ import annotations

import sys
from typing import Final

from gateway.settings import access, pools, running, serving, tasks
from gateway.settings.declaration import (
    CLIENT_CAPABILITIES,
    DEFAULT_HOST,
    DEFAULT_PORT,
    DRAIN_TIMEOUT,
    ENV_PREFIX,
    MAX_WORKERS,
    NO_CAPABILITY,
    Setting,
    env_name,
)

__all__ = [
    "BY_FLAG",
    "CLIENT_CAPABILITIES",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DRAIN_TIMEOUT",
    "ENV_PREFIX",
    "GATEWAY_WIDE",
    "MAX_WORKERS",
    "NO_CAPABILITY",
    "PER_SERVER",
    "SETTINGS",
    "Setting",
    "demo_command",
    "env_name",
]

SETTINGS: Final[tuple[Setting, ...]] = (
    *serving.SETTINGS,
    *pools.SETTINGS,
    *tasks.SETTINGS,
    *running.SETTINGS,
    *access.SETTINGS,
)
"""Every setting, in ``--help-all`` and reference order."""
BY_FLAG: Final = {setting.flag: setting for setting in SETTINGS}
GATEWAY_WIDE: Final = tuple(s for s in SETTINGS if s.field is not None)
"""The settings that are attributes of ``gateway.config.Settings``."""
PER_SERVER: Final = tuple(s for s in SETTINGS if s.key is not None)
"""The settings a server entry of a ``--config`` file may override."""


def demo_command() -> tuple[str, ...]:
    """The built-in demo server, served when no command is given."""
    return (sys.executable, "-m", "gateway.tools.demo.server")
