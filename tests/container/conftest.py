"""The container tier's fixtures: an engine (or a clean skip outside CI), the stand-in bases, and the
project's Dockerfile built once per run.

Outside CI, no Docker engine means every test here is skipped with the reason. With ``CI`` set
(``.ci/run`` runs with CI=true and starts dockerd first, scripts/ci-docker.sh) a missing engine or
a failed build is an error, never a skip: a broken Dockerfile fails CI.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import MACHINE_WIDE
from tests.container.docker import BUILD_TIMEOUT, CI_DOCKER, IMAGE, IN_CI, REPO, docker, engine_answers


@pytest.hookimpl(tryfirst=True)  # before xdist reads the group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/container/" in item.nodeid:
            item.add_marker(pytest.mark.container)
            item.add_marker(MACHINE_WIDE)


@pytest.fixture(scope="session")
def engine() -> None:
    if engine_answers():
        return
    if IN_CI:
        pytest.fail("CI: no Docker engine answers (docker info); .ci/run starts one with scripts/ci-docker.sh engine")
    pytest.skip("no Docker engine answers (docker info); start one with scripts/ci-docker.sh engine (CI always does)")


@pytest.fixture(scope="session")
def standins(engine: None) -> dict[str, str]:
    """NAME → image of the stand-in bases (built by scripts/ci-docker.sh when missing)."""
    done = subprocess.run(
        [str(CI_DOCKER), "bases"], capture_output=True, text=True, timeout=BUILD_TIMEOUT, cwd=REPO, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/ci-docker.sh bases failed:\n{done.stderr[-3000:]}")
    return dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)


@pytest.fixture(scope="session")
def release(standins: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``scripts/release.sh``, the documented release command, run once: the project's own
    Dockerfile, unchanged, built with only the base images as stand-ins, and the chart packaged.
    Its NAME=VALUE lines (VERSION, IMAGE, CHART) and DIST (where the chart went).

    The legacy builder (DOCKER_BUILDKIT=0): Debian's engine comes without the buildx plugin, and
    the Dockerfile needs nothing BuildKit-only. --network host: the build's pip and apt reach the
    registries as the host does. --force-rm: a failed build leaves no container behind."""
    dist = tmp_path_factory.mktemp("dist")
    env = {
        **os.environ,
        "DOCKER_BUILDKIT": "0",
        "DOCKER_BUILD_ARGS": "--network host --force-rm",
        "PYTHON_IMAGE": standins["PYTHON_IMAGE"],
        "NODE_IMAGE": standins["NODE_IMAGE"],
        "DIST": str(dist),
    }
    try:
        done = subprocess.run(
            [str(REPO / "scripts" / "release.sh")],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            cwd=REPO,
            env=env,
            check=False,
        )
    except subprocess.SubprocessError as exc:
        pytest.fail(f"scripts/release.sh did not finish: {exc}")
    if done.returncode != 0:
        pytest.fail(f"scripts/release.sh failed (the Dockerfile does not build?):\n{done.stderr[-4000:]}")
    return {**dict(line.split("=", 1) for line in done.stdout.split() if "=" in line), "DIST": str(dist)}


@pytest.fixture(scope="session")
def image(release: dict[str, str]) -> str:
    """The release's image, under the tier's own tag; its entry point runs."""
    docker("tag", release["IMAGE"], IMAGE)
    try:
        version = docker("run", "--rm", "--network", "none", IMAGE, "--version")
    except RuntimeError as exc:
        pytest.fail(f"the image built but its entry point does not run: {exc}")
    assert version.startswith("mcp-stdio-gateway "), version
    return IMAGE


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
