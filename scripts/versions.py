"""One version for everything a release ships: the package, the image and the chart.

The package's version (pyproject.toml ``[project] version``) is the release's version. The
chart's ``version`` and ``appVersion`` (charts/mcp-stdio-gateway/Chart.yaml) must equal it, and
the image is tagged with it (scripts/release.sh), so ``image.tag`` defaulting to ``appVersion``
pulls the image built from the same commit. A release bumps pyproject.toml and Chart.yaml
together (``set VERSION`` does both) and adds its CHANGELOG.md section.

    python scripts/versions.py check         exit 1, naming each mismatch
    python scripts/versions.py show          print the version
    python scripts/versions.py set VERSION   write it into pyproject.toml and Chart.yaml

Standard library only, so it runs before anything is installed.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = REPO / "pyproject.toml"
CHART = REPO / "charts/mcp-stdio-gateway/Chart.yaml"
CHANGELOG = REPO / "CHANGELOG.md"
SEMVER = re.compile(r"^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$")
"""Helm requires SemVer 2 chart versions; the package's version is kept to the same form."""


def package_version() -> str:
    return str(tomllib.loads(PYPROJECT.read_text())["project"]["version"])


def chart_field(name: str) -> str | None:
    found = re.search(rf'^{name}:\s*"?([^"\s]+)"?\s*$', CHART.read_text(), re.MULTILINE)
    return found.group(1) if found else None


def problems() -> list[str]:
    version = package_version()
    found = []
    if not SEMVER.match(version):
        found.append(f"{PYPROJECT.name}: version {version!r} is not MAJOR.MINOR.PATCH[-PRE] (Helm needs SemVer)")
    for field in ("version", "appVersion"):
        value = chart_field(field)
        if value != version:
            found.append(f"{CHART.relative_to(REPO)}: {field} is {value!r}, not the package's {version!r}")
    if f"## [{version}]" not in CHANGELOG.read_text():
        found.append(f"{CHANGELOG.name}: no section '## [{version}]'")
    return found


def set_version(version: str) -> None:
    if not SEMVER.match(version):
        raise SystemExit(f"{version!r} is not MAJOR.MINOR.PATCH[-PRE]")
    text = PYPROJECT.read_text()
    PYPROJECT.write_text(re.sub(r'(?m)^version = "[^"]*"', f'version = "{version}"', text, count=1))
    chart = re.sub(r"(?m)^version: .*$", f"version: {version}", CHART.read_text(), count=1)
    CHART.write_text(re.sub(r"(?m)^appVersion: .*$", f'appVersion: "{version}"', chart, count=1))


def main(argv: list[str]) -> int:
    if argv[:1] == ["show"]:
        print(package_version())
        return 0
    if argv[:1] == ["set"] and len(argv) == 2:
        set_version(argv[1])
        return 0
    if argv[:1] != ["check"]:
        print(__doc__, file=sys.stderr)
        return 2
    found = problems()
    for problem in found:
        print(f"FAIL {problem}")
    if not found:
        print(f"ok   version {package_version()}: pyproject.toml, Chart.yaml version and appVersion, CHANGELOG.md")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
