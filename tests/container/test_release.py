"""The release command (``scripts/release.sh``, run by the ``release`` fixture that builds the
tier's image): its image and chart carry the package's version."""

from __future__ import annotations

import json
import tarfile
import tomllib
from pathlib import Path

import yaml

from tests.container.docker import REPO, docker


def package_version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def test_the_release_image_is_tagged_and_labelled_with_the_package_version(release: dict[str, str]) -> None:
    version = package_version()
    assert release["VERSION"] == version
    assert release["IMAGE"] == f"mcp-stdio-gateway:{version}"
    labels = json.loads(docker("image", "inspect", "--format", "{{ json .Config.Labels }}", release["IMAGE"]))
    assert labels["org.opencontainers.image.version"] == version
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.revision"] not in ("", "unknown")
    assert labels["org.opencontainers.image.created"][:2] == "20"  # the commit's time, ISO 8601
    reported = docker("run", "--rm", "--network", "none", release["IMAGE"], "--version")
    assert reported.split() == ["mcp-stdio-gateway", version]


def test_the_release_chart_is_packaged_with_the_package_version(release: dict[str, str]) -> None:
    version = package_version()
    package = Path(release["CHART"])
    assert package == Path(release["DIST"]) / f"mcp-stdio-gateway-{version}.tgz"
    with tarfile.open(package) as chart:
        meta = yaml.safe_load(chart.extractfile("mcp-stdio-gateway/Chart.yaml").read())  # type: ignore[union-attr]
        names = chart.getnames()
    assert (meta["version"], meta["appVersion"]) == (version, version)
    assert "mcp-stdio-gateway/templates/tests/test-readyz.yaml" in names
    assert "mcp-stdio-gateway/values.schema.json" in names
    checksum = (package.parent / f"{package.name}.sha256").read_text().split()
    assert checksum[1] == package.name
