"""Validate rendered Kubernetes manifests (``helm template`` output), offline.

Two layers, both needed because a schema alone passes manifests that cannot work:

1. **Schemas.** Every resource is checked, strictly (unknown fields are errors), against the
   Kubernetes OpenAPI schemas that the ``kubernetes-validate`` package ships, for each
   ``--kube-version``. The custom resources the chart renders, prometheus-operator's
   ServiceMonitor and PrometheusRule, are checked against the ``*-v1.subset.schema.json`` files
   beside this file.
   Any other kind without a schema is an error, never a silent pass.
2. **Consistency** of what the schemas cannot see: volume mounts name declared volumes;
   ConfigMaps and Secrets that pods use are rendered (or named with ``--external``); selectors
   match the pod labels; the gateway container keeps the promised hardening (non-root,
   read-only root with writable HOME and /tmp, no privilege escalation, all capabilities
   dropped), has startup/liveness/readiness probes on /readyz and /healthz with a startup
   budget long enough for an ``npx`` cold start, probes it can answer (exec, not HTTP, when
   bound to loopback; plain HTTP GETs on the ops listener's port, bound where the kubelet
   reaches it, when that is on), a termination grace longer than its drain, and sets only
   ``MCP_GATEWAY_*`` variables the gateway's CLI defines (``--known-env``); pods that forward
   to each other (an advertised URL) are let through their NetworkPolicy both ways, the
   ServiceMonitor's scraper is let in, the PrometheusRule names only metrics the gateway
   exports, and a ``helm test`` pod GETs the Service's /readyz.

Runs with the tools venv of scripts/check-deploy.sh (kubernetes-validate, jsonschema, PyYAML).
Exit 0 when every file passes, 1 otherwise; each problem is printed as FILE: RESOURCE: message.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

HERE = Path(__file__).resolve().parent
CUSTOM_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): HERE / "servicemonitor-v1.subset.schema.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): HERE / "prometheusrule-v1.subset.schema.json",
}
METRICS_SOURCE = HERE.parents[1] / "gateway/ops/metrics.py"
"""Where the gateway's metric families are named (``…MetricFamily("mcp_gateway_…"``, and the
request histogram's and counter's names)."""
NPX_COLD_START_BUDGET = 120
"""Seconds the startup probe must allow at least: npx downloads the package before the server answers."""
CHILD_STOP_SECONDS = 4
"""The children's stop after the drain: stdin close, 2 s, SIGTERM, 2 s, SIGKILL."""
GATEWAY_CONTAINER = "gateway"

Resource = dict[str, Any]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifests", nargs="+", type=Path)
    parser.add_argument("--kube-version", action="append", required=True, help="e.g. 1.29.0 (repeatable)")
    parser.add_argument("--known-env", type=Path, help="file listing the gateway's MCP_GATEWAY_* variables")
    parser.add_argument("--external", action="append", default=[], help="a ConfigMap/Secret name managed elsewhere")
    args = parser.parse_args()
    known_env = set(args.known_env.read_text().split()) if args.known_env else None

    failed = False
    for path in args.manifests:
        resources = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        problems = list(schema_problems(resources, args.kube_version))
        problems += list(consistency_problems(resources, set(args.external), known_env))
        kinds = ", ".join(sorted({r["kind"] for r in resources}))
        if problems:
            failed = True
            print(f"FAIL {path}: {len(problems)} problem(s)")
            for problem in problems:
                print(f"     {problem}")
        else:
            print(f"ok   {path}: {len(resources)} resources ({kinds}), Kubernetes {', '.join(args.kube_version)}")
    return 1 if failed else 0


def name_of(resource: Resource) -> str:
    return f"{resource.get('kind')}/{resource.get('metadata', {}).get('name')}"


# --- schemas -------------------------------------------------------------------------------


def schema_problems(resources: list[Resource], versions: list[str]) -> Iterator[str]:
    for resource in resources:
        custom = CUSTOM_SCHEMAS.get((str(resource.get("apiVersion")), str(resource.get("kind"))))
        if custom is not None:
            validator = jsonschema.Draft7Validator(json.loads(custom.read_text()))
            for error in validator.iter_errors(resource):
                yield f"{name_of(resource)}: {error.json_path}: {error.message}"
            continue
        for version in versions:
            try:
                kubernetes_validate.validate(resource, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = "/".join(str(p) for p in exc.path)
                yield f"{name_of(resource)}: Kubernetes {version}: {where}: {exc.message}"
            except kubernetes_validate.SchemaNotFoundError:
                yield f"{name_of(resource)}: no schema for {resource.get('apiVersion')} in Kubernetes {version}"


# --- consistency ---------------------------------------------------------------------------


def consistency_problems(resources: list[Resource], external: set[str], known_env: set[str] | None) -> Iterator[str]:
    rendered = {(r["kind"], r["metadata"]["name"]) for r in resources}
    keys = {
        (r["kind"], r["metadata"]["name"]): set(r.get("data") or {}) | set(r.get("stringData") or {})
        for r in resources
        if r["kind"] in ("ConfigMap", "Secret")
    }
    by_kind: dict[str, list[Resource]] = {}
    for resource in resources:
        by_kind.setdefault(resource["kind"], []).append(resource)
    deployments = by_kind.get("Deployment", [])
    pod_labels = {d["metadata"]["name"]: d["spec"]["template"]["metadata"].get("labels", {}) for d in deployments}

    for deployment in deployments:
        yield from pod_problems(deployment, rendered, keys, external, known_env)
    for service in by_kind.get("Service", []):
        if not any(selects(service["spec"].get("selector", {}), labels) for labels in pod_labels.values()):
            yield f"{name_of(service)}: selector matches no rendered pod"
        ports = {p.get("name") for d in deployments for c in all_containers(d) for p in c.get("ports", [])}
        for port in service["spec"]["ports"]:
            if isinstance(port.get("targetPort"), str) and port["targetPort"] not in ports:
                yield f"{name_of(service)}: targetPort {port['targetPort']!r} is no container port"
    for kind in ("PodDisruptionBudget", "NetworkPolicy"):
        for resource in by_kind.get(kind, []):
            key = "selector" if kind == "PodDisruptionBudget" else "podSelector"
            selector = resource["spec"][key].get("matchLabels", {})
            if not any(selects(selector, labels) for labels in pod_labels.values()):
                yield f"{name_of(resource)}: {key} matches no rendered pod"
    for hpa in by_kind.get("HorizontalPodAutoscaler", []):
        target = hpa["spec"]["scaleTargetRef"]
        if ("Deployment", target["name"]) not in rendered or target["kind"] != "Deployment":
            yield f"{name_of(hpa)}: scaleTargetRef {target['kind']}/{target['name']} is not rendered"
        if any("replicas" in d["spec"] for d in deployments):
            yield f"{name_of(hpa)}: the Deployment also sets replicas, which every upgrade would reset"
    for policy in by_kind.get("NetworkPolicy", []):
        yield from policy_problems(policy, deployments, bool(by_kind.get("ServiceMonitor")))
    for rule in by_kind.get("PrometheusRule", []):
        yield from rule_problems(rule)
    yield from test_pod_problems(by_kind, deployments)
    for monitor in by_kind.get("ServiceMonitor", []):
        services = [
            s
            for s in by_kind.get("Service", [])
            if selects(monitor["spec"]["selector"]["matchLabels"], s["metadata"].get("labels", {}))
        ]
        if not services:
            yield f"{name_of(monitor)}: selector matches no rendered Service"
        port_names = {p.get("name") for s in services for p in s["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            if endpoint.get("port") not in port_names:
                yield f"{name_of(monitor)}: endpoint port {endpoint.get('port')!r} is no Service port"


def policy_problems(policy: Resource, deployments: list[Resource], monitored: bool) -> Iterator[str]:
    """A NetworkPolicy must let scaleOut's forwards through (ingress from and, when egress is
    restricted, egress to the gateway's own pods on its port) and the scraper in."""
    spec = policy["spec"]
    selector = spec["podSelector"].get("matchLabels", {})
    ingress, egress = spec.get("ingress", []), spec.get("egress", [])
    for deployment in deployments:
        labels = deployment["spec"]["template"]["metadata"].get("labels", {})
        if not selects(selector, labels):
            continue
        gateways = [c for c in all_containers(deployment) if c["name"] == GATEWAY_CONTAINER]
        env = {e["name"]: e.get("value") for c in gateways for e in c.get("env", [])}
        port = next((p["containerPort"] for c in gateways for p in c.get("ports", []) if p.get("name") == "http"), None)
        if env.get("MCP_GATEWAY_ADVERTISE_URL"):
            if ingress and not any(admits(rule, "from", labels, ("http", port)) for rule in ingress):
                yield f"{name_of(policy)}: the gateway's pods forward to each other, but no ingress rule admits them"
            if "Egress" in spec.get("policyTypes", []) and not any(
                admits(rule, "to", labels, ("http", port)) for rule in egress
            ):
                yield f"{name_of(policy)}: egress is restricted and no rule lets the pods forward to each other"
        if (
            monitored
            and ingress
            and not any(
                peer.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name") == "prometheus"
                or peer == {}
                for rule in ingress
                for peer in rule.get("from", [{}])
            )
        ):
            yield f"{name_of(policy)}: a ServiceMonitor is rendered, but no ingress rule admits the scraper"


def admits(rule: Resource, direction: str, labels: dict[str, str], port: tuple[str, int | None]) -> bool:
    """``rule`` lets pods with ``labels`` (in the release's namespace) through on ``port``."""
    ports = rule.get("ports")
    if ports and not any(p.get("port") in port for p in ports):
        return False
    peers = rule.get(direction)
    if not peers:
        return True
    return any(
        "namespaceSelector" not in peer
        and "ipBlock" not in peer
        and all(labels.get(k) == v for k, v in peer.get("podSelector", {}).get("matchLabels", {}).items())
        for peer in peers
    )


def exported_metrics() -> set[str]:
    names = set(re.findall(r'"(mcp_gateway_[a-z_]+)"', METRICS_SOURCE.read_text()))
    counters = set(re.findall(r'CounterMetricFamily\(\s*"(mcp_gateway_[a-z_]+)"', METRICS_SOURCE.read_text()))
    counters |= {"mcp_gateway_requests"}  # the request counter, built apart from the families
    return (
        names | {f"{name}_total" for name in counters} | {f"{n}_{s}" for n in names for s in ("bucket", "sum", "count")}
    )


def rule_problems(rule: Resource) -> Iterator[str]:
    known = exported_metrics()
    for group in rule["spec"]["groups"]:
        for entry in group["rules"]:
            for metric in re.findall(r"\bmcp_gateway_[a-z_]+", entry["expr"]):
                if metric not in known:
                    what = entry.get("alert") or entry.get("record")
                    yield f"{name_of(rule)}: {what}: {metric} is not a metric the gateway exports"


def test_pod_problems(by_kind: dict[str, list[Resource]], deployments: list[Resource]) -> Iterator[str]:
    """Each ``helm test`` pod GETs /readyz of a rendered Service on its port, hardened like the gateway."""
    services = {s["metadata"]["name"]: {p["port"] for p in s["spec"]["ports"]} for s in by_kind.get("Service", [])}
    for pod in by_kind.get("Pod", []):
        if pod["metadata"].get("annotations", {}).get("helm.sh/hook") != "test":
            yield f"{name_of(pod)}: a bare Pod that is not a helm test hook"
            continue
        command = " ".join(part for c in pod["spec"]["containers"] for part in c.get("command", []))
        if not any(f"://{name}:{port}/readyz" in command for name, ports in services.items() for port in ports):
            yield f"{name_of(pod)}: does not GET /readyz of a rendered Service on its port"
        for container in pod["spec"]["containers"]:
            security = container.get("securityContext", {})
            if (
                security.get("readOnlyRootFilesystem") is not True
                or security.get("allowPrivilegeEscalation") is not False
            ):
                yield f"{name_of(pod)}: container {container['name']!r} is not hardened like the gateway"
    has_mtls = any(
        e["name"] == "MCP_GATEWAY_TLS_CLIENT_CA_FILE"
        for d in deployments
        for c in all_containers(d)
        for e in c.get("env", [])
    )
    if deployments and services and not has_mtls and not by_kind.get("Pod"):
        yield "no helm test pod, though a Service fronts the gateway"


def pod_problems(
    deployment: Resource,
    rendered: set[tuple[str, str]],
    keys: dict[tuple[str, str], set[str]],
    external: set[str],
    known_env: set[str] | None,
) -> Iterator[str]:
    where = name_of(deployment)
    pod = deployment["spec"]["template"]["spec"]
    if not selects(
        deployment["spec"]["selector"].get("matchLabels", {}),
        deployment["spec"]["template"]["metadata"].get("labels", {}),
    ):
        yield f"{where}: spec.selector does not match the pod template's labels"
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for volume in volumes.values():
        for kind, key, name_key in (("ConfigMap", "configMap", "name"), ("Secret", "secret", "secretName")):
            if key not in volume:
                continue
            name = volume[key][name_key]
            if name in external:
                continue
            if (kind, name) not in rendered:
                yield f"{where}: volume {volume['name']!r} uses {kind} {name!r}, which is not rendered"
            for item in volume[key].get("items", []):
                if item["key"] not in keys.get((kind, name), set()):
                    yield f"{where}: volume {volume['name']!r} wants key {item['key']!r}, absent from {kind} {name!r}"
    for container in all_containers(deployment):
        for mount in container.get("volumeMounts", []):
            if mount["name"] not in volumes:
                yield f"{where}: container {container['name']!r} mounts undeclared volume {mount['name']!r}"
    gateways = [c for c in all_containers(deployment) if c["name"] == GATEWAY_CONTAINER]
    if len(gateways) != 1:
        yield f"{where}: expected one container named {GATEWAY_CONTAINER!r}, found {len(gateways)}"
        return
    files = mounted_files(gateways[0], volumes, keys)
    yield from (f"{where}: gateway: {p}" for p in gateway_problems(gateways[0], pod, volumes, files, known_env))


def gateway_problems(
    container: Resource, pod: Resource, volumes: dict[str, Resource], files: set[str], known_env: set[str] | None
) -> Iterator[str]:
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    if known_env is not None:
        for name in sorted(n for n in env if n.startswith("MCP_GATEWAY_") and n not in known_env):
            yield f"sets {name}, which the gateway's CLI does not define (it would be ignored)"

    security = container.get("securityContext", {})
    pod_security = pod.get("securityContext", {})
    if not (security.get("runAsNonRoot") or pod_security.get("runAsNonRoot")):
        yield "runAsNonRoot is not set"
    if security.get("readOnlyRootFilesystem") is not True:
        yield "readOnlyRootFilesystem is not true"
    if security.get("allowPrivilegeEscalation") is not False:
        yield "allowPrivilegeEscalation is not false"
    if "ALL" not in security.get("capabilities", {}).get("drop", []):
        yield "capabilities do not drop ALL"
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
    for path in ("/tmp", "/home/gateway"):
        mount = mounts.get(path)
        if mount is None or mount.get("readOnly") or "emptyDir" not in volumes.get(mount["name"], {}):
            yield f"{path} is not a writable emptyDir (the root filesystem is read-only)"

    mounted = (
        "MCP_GATEWAY_CONFIG",
        "MCP_GATEWAY_AUTH_TOKEN_FILE",
        "MCP_GATEWAY_STATE_SECRET_FILE",
        "MCP_GATEWAY_TLS_CERT_FILE",
        "MCP_GATEWAY_TLS_KEY_FILE",
        "MCP_GATEWAY_TLS_CLIENT_CA_FILE",
    )
    for variable in mounted:
        if env.get(variable) and env[variable] not in files:
            yield f"{variable}={env[variable]} is not a mounted ConfigMap or Secret key"

    yield from scale_out_problems(container.get("env", []), env)

    loopback = env.get("MCP_GATEWAY_HOST", "127.0.0.1").startswith("127.")
    tls = bool(env.get("MCP_GATEWAY_TLS_CERT_FILE"))
    mutual_tls = bool(env.get("MCP_GATEWAY_TLS_CLIENT_CA_FILE"))
    scheme = "HTTPS" if tls else "HTTP"
    ops = env.get("MCP_GATEWAY_OPS_LISTEN")  # HOST:PORT of the ops listener: plain HTTP, probes and scrapes
    ports = {port.get("name"): port.get("containerPort") for port in container.get("ports", [])}
    for probe_name, path in (("startupProbe", "/readyz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        probe = container.get(probe_name)
        if probe is None:
            yield f"no {probe_name}"
            continue
        if probe.get("httpGet", {}).get("port") == "ops":
            yield from ops_probe_problems(probe_name, probe["httpGet"], path, ops, ports.get("ops"))
        elif mutual_tls:
            # Clients need a certificate the kubelet does not have: only a TCP check can pass.
            if "tcpSocket" not in probe:
                yield f"{probe_name} cannot pass: mutual TLS is on and the probe is not a tcpSocket check"
        elif "httpGet" in probe:
            if probe["httpGet"].get("path") != path:
                yield f"{probe_name} GETs {probe['httpGet'].get('path')}, not {path}"
            if loopback:
                yield f"{probe_name} is an HTTP probe but the gateway binds loopback, which the kubelet cannot reach"
            if probe["httpGet"].get("scheme", "HTTP") != scheme:
                yield f"{probe_name} speaks {probe['httpGet'].get('scheme', 'HTTP')} to a gateway serving {scheme}"
        elif not any(path in part for part in probe.get("exec", {}).get("command", [])):
            yield f"{probe_name} does not check {path}"
        elif not any(f"{scheme.lower()}://" in part for part in probe["exec"]["command"]):
            yield f"{probe_name} does not fetch {scheme.lower()}:// from a gateway serving {scheme}"
    startup = container.get("startupProbe", {})
    budget = startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3)
    if budget < NPX_COLD_START_BUDGET:
        yield f"startupProbe allows {budget} s, less than an npx cold start needs ({NPX_COLD_START_BUDGET} s)"

    drain = float(env.get("MCP_GATEWAY_DRAIN_TIMEOUT") or 20)
    sleep = 0
    pre_stop = container.get("lifecycle", {}).get("preStop", {})
    if pre_stop.get("exec", {}).get("command", [None])[0] == "sleep":
        sleep = int(pre_stop["exec"]["command"][1])
    grace = pod.get("terminationGracePeriodSeconds", 30)
    if grace < sleep + drain + CHILD_STOP_SECONDS:
        needed = f"preStop {sleep} + drain {drain:g} + children's stop {CHILD_STOP_SECONDS}"
        yield f"terminationGracePeriodSeconds {grace} < {needed}"


def ops_probe_problems(
    probe_name: str, get: dict[str, Any], path: str, ops: str | None, port: int | None
) -> Iterator[str]:
    """A probe on the ops listener's port: it must exist, be reachable by the kubelet and speak
    plain HTTP (the ops listener never serves TLS)."""
    if not ops:
        yield f"{probe_name} GETs the ops port but MCP_GATEWAY_OPS_LISTEN is not set"
        return
    host, _, ops_port = ops.rpartition(":")
    if get.get("path") != path:
        yield f"{probe_name} GETs {get.get('path')}, not {path}"
    if host.strip("[]").startswith("127.") or host.strip("[]") == "::1":
        yield f"{probe_name} GETs the ops listener, which binds loopback ({ops}): the kubelet cannot reach it"
    if str(port) != ops_port:
        yield f"the container port named ops ({port}) is not the one MCP_GATEWAY_OPS_LISTEN binds ({ops})"
    if get.get("scheme", "HTTP") != "HTTP":
        yield f"{probe_name} speaks {get['scheme']} to the ops listener, which serves plain HTTP"


def scale_out_problems(entries: list[Resource], env: dict[str, Any]) -> Iterator[str]:
    """An advertised URL needs the shared secret, and may use only variables defined before it
    (Kubernetes expands ``$(VAR)`` from earlier entries; anything else stays literal)."""
    advertised = env.get("MCP_GATEWAY_ADVERTISE_URL")
    if not advertised:
        return
    if not env.get("MCP_GATEWAY_STATE_SECRET_FILE"):
        yield "MCP_GATEWAY_ADVERTISE_URL without MCP_GATEWAY_STATE_SECRET_FILE (the gateway refuses to start)"
    names = [e["name"] for e in entries]
    before = set(names[: names.index("MCP_GATEWAY_ADVERTISE_URL")])
    for variable in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", advertised):
        if variable not in before:
            yield f"MCP_GATEWAY_ADVERTISE_URL uses $({variable}), which no earlier env entry defines"
    if int(env.get("MCP_GATEWAY_WORKERS") or 1) > 1:
        yield "MCP_GATEWAY_ADVERTISE_URL with MCP_GATEWAY_WORKERS > 1 (the gateway refuses to start)"


def mounted_files(container: Resource, volumes: dict[str, Resource], keys: dict[tuple[str, str], set[str]]) -> set[str]:
    """Paths of the ConfigMap and Secret keys that the container sees."""
    files: set[str] = set()
    for mount in container.get("volumeMounts", []):
        volume = volumes.get(mount["name"], {})
        if "configMap" in volume:
            kind, source = "ConfigMap", volume["configMap"]
            name = source["name"]
        elif "secret" in volume:
            kind, source = "Secret", volume["secret"]
            name = source["secretName"]
        else:
            continue
        paths = [item["path"] for item in source["items"]] if "items" in source else keys.get((kind, name), set())
        files.update(f"{mount['mountPath'].rstrip('/')}/{path}" for path in paths)
    return files


def all_containers(deployment: Resource) -> list[Resource]:
    pod = deployment["spec"]["template"]["spec"]
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


if __name__ == "__main__":
    sys.exit(main())
