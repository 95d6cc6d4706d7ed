"""Print deploy/constraints.txt: the runtime dependency closure of pyproject.toml, pinned to
the versions installed here (``pip freeze``, restricted to what the image installs).

Usage: python3 scripts/freeze-constraints.py > deploy/constraints.txt
Markers are evaluated for the image (CPython 3.12 on Linux), so backports the image does not
need are left out. Needs ``packaging`` (pip's own dependency; installed with pip's tooling).
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement

IMAGE_ENV = {
    "python_version": "3.12",
    "python_full_version": "3.12.13",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}
HEADER = """\
# Runtime dependencies of the image, pinned (pip install -c): the versions the gateway's tests
# ran with. Regenerate after changing pyproject.toml's dependencies, in the environment the
# tests pass in: python3 scripts/freeze-constraints.py > deploy/constraints.txt"""


def closure(roots: list[str]) -> dict[str, str]:
    pins: dict[str, str] = {}
    seen: set[tuple[str, tuple[str, ...]]] = set()
    stack = [Requirement(r) for r in roots]
    while stack:
        req = stack.pop()
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        key = (name, tuple(sorted(req.extras)))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = distribution(req.name)
        except PackageNotFoundError:
            sys.exit(f"freeze-constraints: {req.name} is not installed here; pip install -e . first")
        pins[name] = dist.version
        for raw in dist.requires or []:
            sub = Requirement(raw)
            extras = list(req.extras) or [""]
            if sub.marker is None or any(sub.marker.evaluate({**IMAGE_ENV, "extra": e}) for e in extras):
                stack.append(sub)
    return pins


def main() -> None:
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    pins = closure(project["project"]["dependencies"])
    print(HEADER)
    for name in sorted(pins):
        print(f"{name}=={pins[name]}")


if __name__ == "__main__":
    main()
