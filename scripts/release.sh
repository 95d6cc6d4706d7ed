#!/usr/bin/env bash
# Build a release: the container image and the Helm chart, both carrying the package's version.
#
#   scripts/release.sh            build IMAGE:VERSION and package dist/mcp-stdio-gateway-VERSION.tgz
#   scripts/release.sh --push     the same, then push the image (and the chart, with CHART_REPO)
#
# VERSION is pyproject.toml's; scripts/versions.py check first makes sure Chart.yaml's version
# and appVersion and CHANGELOG.md agree with it (bump them with `scripts/versions.py set V`).
# The image is labelled org.opencontainers.image.version=VERSION, .revision=the commit,
# .created=the commit's time (so two builds of one commit carry the same labels), and the chart's
# image.tag defaults to appVersion: installing the packaged chart pulls this image.
#
# Environment:
#   IMAGE              the image repository (default mcp-stdio-gateway), e.g. registry.example.com/mcp-stdio-gateway
#   PYTHON_IMAGE, NODE_IMAGE   base images (build arguments; default: the Dockerfile's pinned ones;
#                      CI passes the stand-ins that scripts/ci-docker.sh bases builds)
#   DOCKER_BUILD_ARGS  more `docker build` flags (CI: --network host --force-rm)
#   HELM               the helm binary (default: helm on PATH, else .deploy-tools/helm/helm)
#   CHART_REPO         with --push: an OCI registry for the chart, e.g. oci://registry.example.com/charts
#   DIST               where the chart package goes (default dist/)
# Prints NAME=VALUE lines (VERSION, IMAGE, CHART) on stdout; progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'release: %s\n' "$*" >&2; }
fail() { say "$*"; exit 1; }

push=false
case "${1:-}" in
"") ;;
--push) push=true ;;
*) fail "usage: scripts/release.sh [--push]" ;;
esac

python3 scripts/versions.py check >&2 || fail "versions disagree (scripts/versions.py set VERSION fixes them)"
VERSION=$(python3 scripts/versions.py show)
REPOSITORY=${IMAGE:-mcp-stdio-gateway}
TAG=$REPOSITORY:$VERSION
DIST=${DIST:-dist}
CHART=charts/mcp-stdio-gateway
if [[ -z ${HELM:-} ]]; then
    HELM=$(command -v helm || true)
    [[ -n $HELM ]] || HELM=.deploy-tools/helm/helm
fi
[[ -x $HELM ]] || fail "no helm (install it, set HELM, or run scripts/check-deploy.sh, which fetches one)"
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
CREATED=$(git log -1 --format=%cI 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)
if [[ -n $(git status --porcelain 2>/dev/null) ]]; then
    say "the work tree has uncommitted changes: the image's revision label says $REVISION-dirty"
    REVISION=$REVISION-dirty
fi

build=(build -t "$TAG" --build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION" --build-arg "CREATED=$CREATED")
for base in PYTHON_IMAGE NODE_IMAGE; do
    [[ -z ${!base:-} ]] || build+=(--build-arg "$base=${!base}")
done
# shellcheck disable=SC2206 # DOCKER_BUILD_ARGS is a list of flags, split on purpose
build+=(${DOCKER_BUILD_ARGS:-})
say "building $TAG (revision $REVISION)"
docker "${build[@]}" . >&2 || fail "docker build failed"
label=$(docker image inspect --format '{{ index .Config.Labels "org.opencontainers.image.version" }}' "$TAG")
[[ $label == "$VERSION" ]] || fail "$TAG is labelled version '$label', not $VERSION"

mkdir -p "$DIST"
say "packaging $CHART into $DIST/"
"$HELM" lint --strict --quiet "$CHART" --set stateSecret=release-lint >&2 || fail "helm lint failed"
"$HELM" package "$CHART" --version "$VERSION" --app-version "$VERSION" --destination "$DIST" >&2 \
    || fail "helm package failed"
PACKAGE=$DIST/mcp-stdio-gateway-$VERSION.tgz
[[ -f $PACKAGE ]] || fail "helm package wrote no $PACKAGE"
(cd "$DIST" && sha256sum "$(basename "$PACKAGE")" >"$(basename "$PACKAGE").sha256")

if $push; then
    say "pushing $TAG"
    docker push "$TAG" >&2
    say "image digest: $(docker image inspect --format '{{ join .RepoDigests " " }}' "$TAG") (set image.digest to pin it)"
    if [[ -n ${CHART_REPO:-} ]]; then
        "$HELM" push "$PACKAGE" "$CHART_REPO" >&2
    fi
fi
printf 'VERSION=%s\nIMAGE=%s\nCHART=%s\n' "$VERSION" "$TAG" "$PACKAGE"
