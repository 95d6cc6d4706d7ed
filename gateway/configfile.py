"""Many servers from one JSON file, in the ``mcpServers`` shape desktop MCP clients use.

::

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/data"]},
        "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
                   "env": {"GITHUB_API_URL": "https://api.github.com"},
                   "envFromHeaders": {"X-GitHub-Token": "GITHUB_PERSONAL_ACCESS_TOKEN"},
                   "isolation": "principal",
                   "pool": {"min": 0, "max": 8, "maxInFlight": 1, "idleTimeout": 600}}
    }}

Keys per server: ``command`` (required), ``args``, ``env`` (a value of ``null`` removes the
variable), ``cwd``, ``inheritEnv``, and the gateway's own: ``pool`` (``min``, ``max``,
``maxInFlight``, ``queueTimeout``, ``idleTimeout``, ``maxRequests``, ``maxAge``,
``stallTimeout``, ``livenessInterval``), ``isolation``, ``childAsks`` (``auto``, ``always``,
``never``: whether requests that may ask get a child each), ``dualEra`` (``per-client``,
``modern``, ``legacy``: which era a child that speaks both is opened in), ``envFromHeaders``,
``requestTimeout``, ``probeTimeout``, ``startupTimeout``, ``maxLineBytes``, ``maxStdinQueueBytes``,
``stdinStallTimeout``, ``maxBatchSize``,
``maxSessionsPerPrincipal`` (legacy sessions one principal may hold on this server),
``oauth`` (``issuer``, ``jwksUrl``, ``audience``, ``scopes``, ``principalClaim``: how its
access tokens are checked, over the ``--oauth-*`` flags), ``clientCapabilities`` (what a
legacy child is told the client can do: an object with ``sampling``, ``elicitation``,
``roots``; ``{}`` or ``"none"`` for nothing; by default all three), ``roots`` (paths or
``file://`` URIs, or ``{"uri", "name"}`` objects: the gateway's answer to the child's
``roots/list`` when no client can give one)
and ``inputTimeout``; ``readyRequired: true`` makes the replica unready while this server is
not ready (as ``--ready-requires NAME`` does; by default a server that is not ready is reported
and the replica stays ready while another server is, ``gateway.relay.readiness``).
Keys not given take the command line's values. Unknown keys are
refused, so a typo never silently does nothing; ``disabled: true`` skips a server.
Every problem is a ``ConfigError`` naming the key path, e.g. ``mcpServers.files.pool.max``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

import orjson

from gateway.errors import ConfigError
from gateway.oauth.policy import OAuthPolicy
from gateway.protocol.dispatchstate import PoolSettings
from gateway.protocol.roots import parse_root
from gateway.relay.server_config import ServerConfig
from gateway.settings import PER_SERVER, Setting
from gateway.settings.declaration import either

NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
"""Server names become URL path segments (/servers/NAME/mcp)."""

_POOL_KEYS: Final = {
    s.key.removeprefix("pool."): (s.target.removeprefix("pool."), s.kind)
    for s in PER_SERVER
    if s.key and s.target and s.key.startswith("pool.")
}
"""``pool`` keys: the ``PoolSettings`` field each sets, and its type (from ``gateway.settings``)."""
_PLAIN: Final = tuple(s for s in PER_SERVER if s.key and "." not in s.key and not s.repeat)
"""Per-server keys whose value has the command line's form (a number, a switch, or one of the choices):
checked and converted as declared, with no code of their own here."""
FLAG_KEYS: Final = {s.flag: s.key for s in PER_SERVER if s.key}
"""Command-line flags a server entry may override, and the key it uses (the reference doc)."""
_KNOWN: Final = {"command", "args", "env", "cwd", "inheritEnv", "disabled", "type", "readyRequired"} | {
    str(s.key).split(".")[0] for s in PER_SERVER
}
"""Every key a server entry may have: the per-server settings' top-level keys and the child's own."""


def load_servers(path: str | Path, base: ServerConfig) -> tuple[ServerConfig, ...]:
    """Read ``path``; each server starts from ``base`` (the command line's settings)."""
    try:
        raw = orjson.loads(Path(path).read_bytes())
    except OSError as exc:
        raise ConfigError("--config", f"cannot read {path}: {exc.strerror}") from exc
    except orjson.JSONDecodeError as exc:
        raise ConfigError("--config", f"{path} is not valid JSON: {exc}") from exc
    return parse_servers(raw, base)


def parse_servers(raw: Any, base: ServerConfig) -> tuple[ServerConfig, ...]:
    servers = _object(raw, "(top level)").get("mcpServers")
    if servers is None:
        raise ConfigError("mcpServers", 'missing: the file needs {"mcpServers": {"NAME": {...}}}')
    entries = _object(servers, "mcpServers")
    out = []
    for name, entry in entries.items():
        where = f"mcpServers.{name}"
        if not NAME.match(name):
            raise ConfigError(where, "a server name is 1-63 letters, digits, '.', '_' or '-' (it becomes a URL path)")
        body = _object(entry, where)
        if body.get("disabled") is True:
            continue
        out.append(_server(name, body, base, where))
    if not out:
        raise ConfigError("mcpServers", "no (enabled) server is configured")
    return tuple(out)


def _server(name: str, body: Mapping[str, Any], base: ServerConfig, where: str) -> ServerConfig:
    unknown = sorted(set(body) - _KNOWN)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}", f"unknown key (known: {', '.join(sorted(_KNOWN))})")
    if body.get("type") not in (None, "stdio"):
        raise ConfigError(f"{where}.type", "only stdio servers can be put behind the gateway")
    command = body.get("command")
    if not isinstance(command, str) or not command:
        raise ConfigError(f"{where}.command", "required: the program to run")
    args = body.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{where}.args", "must be a list of strings")
    env = _object(body.get("env", {}), f"{where}.env")
    for key, value in env.items():
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{where}.env.{key}", "must be a string, or null to remove the variable")
    spec = replace(base.spec, command=command, args=tuple(args), env=dict(env), name=name)
    if "cwd" in body:
        spec = replace(spec, cwd=_string(body["cwd"], f"{where}.cwd"))
    if "inheritEnv" in body:
        spec = replace(spec, inherit_env=_bool(body["inheritEnv"], f"{where}.inheritEnv"))
    if "clientCapabilities" in body:
        given = body["clientCapabilities"]
        capabilities = {} if given == "none" else _object(given, f"{where}.clientCapabilities")
        for key, value in capabilities.items():
            _object(value, f"{where}.clientCapabilities.{key}")
        spec = replace(spec, client_capabilities=capabilities)
    if "roots" in body:
        roots = body["roots"]
        if not isinstance(roots, list):
            raise ConfigError(f"{where}.roots", "must be a list of paths, file:// URIs or {uri, name} objects")
        spec = replace(spec, roots=tuple(parse_root(root, f"{where}.roots[{i}]") for i, root in enumerate(roots)))
    config = replace(base, name=name, spec=spec)
    if "readyRequired" in body:
        config = replace(config, ready_required=_bool(body["readyRequired"], f"{where}.readyRequired"))
    if "pool" in body:
        config = replace(config, pool=_pool(body["pool"], base.pool, f"{where}.pool"))
    for setting in _PLAIN:  # after "pool": childAsks lands in the pool
        if setting.key is not None and setting.key in body:
            config = _plain(config, setting, body[setting.key], f"{where}.{setting.key}")
    if "envFromHeaders" in body:
        mapping = _object(body["envFromHeaders"], f"{where}.envFromHeaders")
        for header, variable in mapping.items():
            if not isinstance(variable, str) or not variable or "=" in variable:
                raise ConfigError(f"{where}.envFromHeaders.{header}", "must name an environment variable")
        config = replace(config, env_from_headers={h.lower(): v for h, v in mapping.items()})
    if "oauth" in body:
        config = replace(config, oauth=_oauth(body["oauth"], base.oauth, f"{where}.oauth"))
    if "taskTools" in body:
        patterns = body["taskTools"]
        if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
            raise ConfigError(f"{where}.taskTools", "must be a list of tool-name patterns")
        config = replace(config, task_tools=tuple(patterns))
    return config


def _plain(config: ServerConfig, setting: Setting, value: Any, where: str) -> ServerConfig:
    """``config`` with ``setting`` (of ``_PLAIN``) set from a server entry's ``value``."""
    if setting.kind is bool:
        value = _bool(value, where)
    elif setting.choices:
        if value not in setting.choices:
            raise ConfigError(where, f"must be {either(setting.choices)}")
    else:
        value = _number(value, where, setting.kind)
        problem = setting.problem(value)
        if problem is not None:
            raise ConfigError(where, problem)
    owner, _, name = str(setting.target).partition(".")
    value = setting.converted(value)
    if owner == "spec":
        return replace(config, spec=replace(config.spec, **{name: value}))
    if owner == "pool":
        return replace(config, pool=replace(config.pool, **{name: value}))
    return replace(config, **{name: value})


_OAUTH_FLAG_KEYS: Final = {
    "--oauth-jwks-url": "jwksUrl",
    "--oauth-principal-claim": "principalClaim",
    "--oauth-scope": "scopes",
}
"""The ``oauth`` object's key for each flag an ``OAuthPolicy`` error names (the rest: the flag's last word)."""
_OAUTH_KEYS: Final = {
    "issuer": "issuer",
    "jwksUrl": "jwks_url",
    "audience": "audience",
    "principalClaim": "principal_claim",
}


def _oauth(raw: Any, base: OAuthPolicy | None, where: str) -> OAuthPolicy:
    """A server's ``oauth`` object over the command line's ``--oauth-*`` values."""
    body = _object(raw, where)
    values: dict[str, Any] = {}
    for key, value in body.items():
        if key == "scopes":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{where}.scopes", "must be a list of strings")
            values["scopes"] = tuple(value)
        elif key in _OAUTH_KEYS:
            values[_OAUTH_KEYS[key]] = _string(value, f"{where}.{key}")
        else:
            raise ConfigError(f"{where}.{key}", f"unknown key (known: {', '.join([*_OAUTH_KEYS, 'scopes'])})")
    if base is None and "issuer" not in values:
        raise ConfigError(f"{where}.issuer", "required (or --oauth-issuer on the command line)")
    try:
        return replace(base, **values) if base is not None else OAuthPolicy(**values)
    except ConfigError as exc:
        problem = exc.message.removeprefix(f"{exc.key}: ")
        key = _OAUTH_FLAG_KEYS.get(exc.key, exc.key.removeprefix("--oauth-"))
        raise ConfigError(f"{where}.{key}", problem) from exc


def _pool(raw: Any, base: PoolSettings, where: str) -> PoolSettings:
    body = _object(raw, where)
    values: dict[str, Any] = {}
    for key, value in body.items():
        if key not in _POOL_KEYS:
            raise ConfigError(f"{where}.{key}", f"unknown key (known: {', '.join(_POOL_KEYS)})")
        attribute, kind = _POOL_KEYS[key]
        values[attribute] = _number(value, f"{where}.{key}", kind)
    if "min_size" in values and "max_size" not in values:
        values["max_size"] = max(values["min_size"], base.max_size, 1)
    try:
        return replace(base, **values)
    except ValueError as exc:
        raise ConfigError(where, str(exc)) from exc


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(where, "must be a JSON object")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(where, "must be a string")
    return value


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(where, "must be true or false")
    return value


def _number(value: Any, where: str, kind: type) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise ConfigError(where, f"must be {'an integer' if kind is int else 'a number'}")
    if value < 0:
        raise ConfigError(where, "must not be negative")
    return kind(value)
