"""The container tier's fixtures: an engine (or a clean skip outside CI), the stand-in bases, and the
project's Dockerfile built once per run.

Outside CI, no Docker engine means every test here is skipped with the reason. With ``CI`` set
(``.ci/run`` runs with CI=true and starts dockerd first, scripts/ci-docker.sh) a missing engine or
a failed build is an error, never a skip: a broken Dockerfile fails CI.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.container.docker import BUILD_TIMEOUT, CI_DOCKER, IMAGE, IN_CI, REPO, docker, engine_answers


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/container/" in item.nodeid:
            item.add_marker(pytest.mark.container)


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
def image(standins: dict[str, str]) -> str:
    """The project's own Dockerfile, unchanged, built once; only the base images are stand-ins.

    The legacy builder (DOCKER_BUILDKIT=0): Debian's engine comes without the buildx plugin, and
    the Dockerfile needs nothing BuildKit-only. --network host: the build's pip and apt reach the
    registries as the host does. --force-rm: a failed build leaves no container behind."""
    command = ["build", "--force-rm", "--network", "host", "-t", IMAGE]
    for arg in ("PYTHON_IMAGE", "NODE_IMAGE"):
        command += ["--build-arg", f"{arg}={standins[arg]}"]
    try:
        docker(*command, str(REPO), timeout=BUILD_TIMEOUT, DOCKER_BUILDKIT="0")
    except (RuntimeError, subprocess.SubprocessError) as exc:
        pytest.fail(f"the Dockerfile does not build: {exc}")
    try:
        version = docker("run", "--rm", "--network", "none", IMAGE, "--version")
    except RuntimeError as exc:
        pytest.fail(f"the image built but its entry point does not run: {exc}")
    assert version.startswith("mcp-stdio-gateway "), version
    return IMAGE


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
