"""Check docker-compose.yml (and the Dockerfile's ENV) for what the compose-spec schema cannot see.

The schema (check-jsonschema's vendored compose-spec) says the file is well-formed; this says
the pieces fit together:

- every ``MCP_GATEWAY_*`` variable set in the compose file or the Dockerfile is one the
  gateway's CLI defines (``--known-env``), so none is silently ignored;
- the gateway publishes no port: the authenticating proxy is the only way in;
- the gateway trusts its principal header from exactly the proxy's fixed address, which lies
  in the network's subnet, and the proxy's nginx.conf sets that same header;
- files the compose file mounts or builds from exist;
- the stop grace outlasts the drain plus the children's stop, and the health check allows an
  ``npx`` cold start;
- every service with a read-only root filesystem has writable mounts (a volume or tmpfs at the
  path or above it) for what the image's users write: /tmp, the npm cache, uv's cache and
  uv's tool directory (``uvx`` writes both);
- fixed subnets lie outside Docker's default address pools (``up`` fails with "Pool overlaps"
  once Docker has handed the range to another network);
- the proxy's image is pinned by digest (``@sha256:``), also as the default of a variable;
- several gateway replicas advertise their addresses and share the state secret (a compose
  secret), so any replica answers any request;
- no top-level ``name:`` (docker-compose 1.29, Debian's, refuses it).

Variables (``${VAR:-default}``) are read at their defaults: the file as shipped is checked.

Exit 0 when all hold, 1 otherwise, printing each problem.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

NPX_COLD_START_BUDGET = 120
CHILD_STOP_SECONDS = 4
GATEWAY_DEFAULT_DRAIN = 20.0
WRITTEN_PATHS = ("/tmp", "/home/gateway/.npm", "/home/gateway/.cache/uv", "/home/gateway/.local/share/uv")
"""What the gateway's image writes at run time (its Dockerfile's NPM_CONFIG_CACHE, UV_CACHE_DIR and
UV_TOOL_DIR, and children's temporary files): each must be writable under ``read_only: true``."""
DOCKER_DEFAULT_POOLS = (
    *(ipaddress.ip_network(f"172.{second}.0.0/16") for second in range(17, 32)),
    ipaddress.ip_network("192.168.0.0/16"),
)
"""Where dockerd allocates networks given no subnet: 172.17.0.0/16 … 172.31.0.0/16, then 192.168.0.0/16 in /20s."""
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}\}?$")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("compose", type=Path)
    parser.add_argument("--dockerfile", type=Path)
    parser.add_argument("--known-env", type=Path)
    parser.add_argument("--gateway", default="gateway", help="the gateway's service name")
    parser.add_argument("--proxy", default="proxy", help="the reverse proxy's service name")
    args = parser.parse_args()
    known = set(args.known_env.read_text().split()) if args.known_env else None

    raw = yaml.safe_load(args.compose.read_text())
    compose = at_defaults(raw)
    problems = [f"top-level name: {raw['name']!r}: docker-compose 1.29 refuses it"] if "name" in raw else []
    problems += list(compose_problems(compose, args.compose.parent, args.gateway, args.proxy, known))
    if args.dockerfile is not None:
        problems += list(dockerfile_problems(args.dockerfile, known))
    if problems:
        print(f"FAIL {args.compose}: {len(problems)} problem(s)")
        for problem in problems:
            print(f"     {problem}")
        return 1
    print(f"ok   {args.compose}: gateway behind {args.proxy}, trusted header and addresses consistent")
    return 0


def compose_problems(
    compose: dict[str, Any], base: Path, gateway_name: str, proxy_name: str, known: set[str] | None
) -> Iterator[str]:
    services = compose.get("services", {})
    gateway, proxy = services.get(gateway_name), services.get(proxy_name)
    if gateway is None or proxy is None:
        yield f"services {gateway_name!r} and {proxy_name!r} are both required"
        return
    env = environment(gateway)
    if known is not None:
        for name in sorted(n for n in env if n.startswith("MCP_GATEWAY_") and n not in known):
            yield f"{gateway_name}: sets {name}, which the gateway's CLI does not define"
    if gateway.get("ports"):
        yield f"{gateway_name}: publishes ports; only the proxy should be reachable"
    if env.get("MCP_GATEWAY_HOST", "0.0.0.0") != "0.0.0.0":
        yield f"{gateway_name}: MCP_GATEWAY_HOST must stay 0.0.0.0 for the proxy to reach it"

    header = env.get("MCP_GATEWAY_PRINCIPAL_HEADER")
    trusted = [t.strip() for t in env.get("MCP_GATEWAY_TRUSTED_PROXY", "").split(",") if t.strip()]
    if not header or not trusted:
        yield f"{gateway_name}: needs MCP_GATEWAY_PRINCIPAL_HEADER and MCP_GATEWAY_TRUSTED_PROXY"
    proxy_addresses: dict[str, ipaddress.IPv4Address | ipaddress.IPv6Address] = {}
    for network, settings in (proxy.get("networks") or {}).items():
        if isinstance(settings, dict) and settings.get("ipv4_address"):
            proxy_addresses[network] = ipaddress.ip_address(settings["ipv4_address"])
    fixed = sorted(str(a) for a in proxy_addresses.values())
    for trusted_address in trusted:
        if ipaddress.ip_network(trusted_address, strict=False) not in [ipaddress.ip_network(a) for a in fixed]:
            yield f"{gateway_name}: trusts {trusted_address}, which is not the proxy's fixed address {fixed}"
    for network, address in proxy_addresses.items():
        subnets = [
            ipaddress.ip_network(c["subnet"])
            for c in (compose.get("networks", {}).get(network) or {}).get("ipam", {}).get("config", [])
        ]
        for subnet in subnets:
            if any(subnet.overlaps(pool) for pool in DOCKER_DEFAULT_POOLS):
                yield f"network {network!r}: {subnet} overlaps Docker's default address pools"
        if not any(address in subnet for subnet in subnets):
            yield f"{proxy_name}: {address} is outside network {network!r}'s subnets {[str(s) for s in subnets]}"
        if network not in (gateway.get("networks") or {}):
            yield f"{gateway_name}: not on network {network!r}, where the proxy has its fixed address"

    for volume in proxy.get("volumes", []):
        source = volume.split(":")[0] if isinstance(volume, str) else volume.get("source", "")
        if source.startswith((".", "/")) and source.endswith("nginx.conf") and header:
            conf = (base / source).read_text()
            if not re.search(rf"proxy_set_header\s+{re.escape(header)}\s", conf, re.IGNORECASE):
                yield f"{proxy_name}: {source} does not set {header}, the header the gateway trusts"
    image = str(proxy.get("image", ""))
    if not DIGEST.search(image):
        yield f"{proxy_name}: image {image!r} is not pinned by digest (@sha256:…)"
    yield from read_only_problems(services)
    yield from missing_files(compose, base)
    yield from replica_problems(compose, gateway_name, gateway, env)

    drain = float(env.get("MCP_GATEWAY_DRAIN_TIMEOUT", GATEWAY_DEFAULT_DRAIN))
    grace = seconds(gateway.get("stop_grace_period", "10s"))
    if grace < drain + CHILD_STOP_SECONDS:
        yield f"{gateway_name}: stop_grace_period {grace:g}s < drain {drain:g}s + children's stop {CHILD_STOP_SECONDS}s"
    start = seconds((gateway.get("healthcheck") or {}).get("start_period", "0s"))
    if start < NPX_COLD_START_BUDGET:
        yield f"{gateway_name}: healthcheck start_period {start:g}s < an npx cold start's {NPX_COLD_START_BUDGET}s"


def replica_problems(compose: dict[str, Any], name: str, gateway: dict[str, Any], env: dict[str, str]) -> Iterator[str]:
    """Several gateway replicas behind the proxy must route sessions to each other: each
    advertises its address and they share the state secret, mounted from a compose secret."""
    replicas = int((gateway.get("deploy") or {}).get("replicas", 1))
    if replicas < 2:
        return
    if not env.get("MCP_GATEWAY_ADVERTISE_URL"):
        yield f"{name}: {replicas} replicas without MCP_GATEWAY_ADVERTISE_URL: legacy sessions would 404 elsewhere"
    if gateway.get("container_name"):
        yield f"{name}: container_name cannot be set on a service with {replicas} replicas"
    secret_file = env.get("MCP_GATEWAY_STATE_SECRET_FILE")
    if not secret_file:
        yield f"{name}: {replicas} replicas without MCP_GATEWAY_STATE_SECRET_FILE (the replicas must share it)"
        return
    targets = {
        (item.get("target") or f"/run/secrets/{item.get('source')}")
        if isinstance(item, dict)
        else f"/run/secrets/{item}"
        for item in gateway.get("secrets", [])
    }
    if secret_file not in targets:
        yield f"{name}: MCP_GATEWAY_STATE_SECRET_FILE={secret_file} is not one of its compose secrets {sorted(targets)}"


def read_only_problems(services: dict[str, Any]) -> Iterator[str]:
    """Each read-only service mounts something writable at or above every path in WRITTEN_PATHS."""
    for name, service in services.items():
        if not service.get("read_only"):
            continue
        targets = [t.split(":")[0] for t in service.get("tmpfs", [])]
        for volume in service.get("volumes", []):
            if isinstance(volume, str):
                parts = volume.split(":")
                if len(parts) >= 2 and "ro" not in parts[2:]:
                    targets.append(parts[1])
            elif not volume.get("read_only"):
                targets.append(volume.get("target", ""))
        for path in WRITTEN_PATHS:
            if not any(path == t or path.startswith(t.rstrip("/") + "/") for t in targets if t):
                yield f"{name}: read_only, but nothing writable is mounted at {path} (or above it)"


def missing_files(compose: dict[str, Any], base: Path) -> Iterator[str]:
    for name, service in compose.get("services", {}).items():
        build = service.get("build")
        context = build if isinstance(build, str) else (build or {}).get("context")
        if context and not (base / context).is_dir():
            yield f"{name}: build context {context} does not exist"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0] if isinstance(volume, str) else volume.get("source", "")
            if source.startswith((".", "/")) and not (base / source).exists():
                yield f"{name}: mounts {source}, which does not exist"
    for name, secret in (compose.get("secrets") or {}).items():
        if "file" in secret and not (base / secret["file"]).is_file():
            yield f"secret {name}: file {secret['file']} does not exist"


def dockerfile_problems(path: Path, known: set[str] | None) -> Iterator[str]:
    if known is None:
        return
    text = path.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        if line.strip().upper().startswith("ENV "):
            for name in re.findall(r"\b(MCP_GATEWAY_[A-Z0-9_]+)=", line):
                if name not in known:
                    yield f"{path}: ENV {name} is not defined by the gateway's CLI"


VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


def at_defaults(value: Any) -> Any:
    """``value`` with every ``${VAR:-default}`` (or ``${VAR-default}``) replaced by its default, and
    ``${VAR}`` by nothing, in every string, key or value."""
    if isinstance(value, str):
        return VARIABLE.sub(lambda m: m.group(2) or "", value)
    if isinstance(value, dict):
        return {at_defaults(k): at_defaults(v) for k, v in value.items()}
    if isinstance(value, list):
        return [at_defaults(v) for v in value]
    return value


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def seconds(duration: str | int | float) -> float:
    """Compose durations: 90, '90s', '1m30s', '1h', '500ms'."""
    if isinstance(duration, int | float):
        return float(duration)
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"([0-9.]+)(ms|us|h|m|s)", duration)
    return sum(float(value) * units[unit] for value, unit in parts)


if __name__ == "__main__":
    sys.exit(main())
