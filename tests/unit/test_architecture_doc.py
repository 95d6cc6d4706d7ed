"""docs/architecture.md names the modules that exist, and every module is named there.

A module counts as named when the page writes its path (``gateway/relay/router.py``, or
``relay/router.py`` as the flow diagram does), or its package's path (``gateway/protocol/``)
together with its name in backticks (``jsonrpc``). A path the page writes, either way, must
exist in the tree.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PATH = re.compile(r"gateway/[A-Za-z0-9_/]+(?:\.py|/)")
TICKED = re.compile(r"`([A-Za-z0-9_./]+)`")
SHORT = re.compile(r"(?<![\w/])(?:protocol|stdio|relay|http|ops|oauth|settings|tools)/[A-Za-z0-9_/]+\.py")
"""A path written from inside the package (``relay/listens.py``), as the flow diagram does."""


def modules() -> list[Path]:
    return sorted(
        p.relative_to(ROOT)
        for p in (ROOT / "gateway").rglob("*.py")
        if "__pycache__" not in p.parts and p.name not in {"__init__.py", "__main__.py"}
    )


def test_every_path_the_page_names_exists() -> None:
    text = DOC.read_text()
    missing = sorted({path for path in PATH.findall(text) if not (ROOT / path).exists()})
    missing += sorted({path for path in SHORT.findall(text) if not (ROOT / "gateway" / path).exists()})
    assert missing == []


def test_every_module_is_named_on_the_page() -> None:
    text = DOC.read_text()
    paths = set(PATH.findall(text))
    ticked = set(TICKED.findall(text))
    unnamed = []
    for module in modules():
        path = module.as_posix()
        if path in paths:
            continue
        package = module.parent.as_posix() + "/"
        stem = module.stem
        # "gateway/protocol/" plus `jsonrpc`, or a relative path such as `relay/listens.py`
        relative = "/".join(module.parts[1:])
        if (package in paths and stem in ticked) or relative in SHORT.findall(text):
            continue
        unnamed.append(path)
    assert unnamed == []
