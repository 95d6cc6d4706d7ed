"""docs/operations.md's tables, read so tests can hold the page to the code: the access line's
JSON fields and every metric with its type and labels."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

PAGE: Final = Path(__file__).resolve().parent.parent / "docs" / "operations.md"
_NAME: Final = re.compile(r"`([a-z_]+)`")


def table(header: str) -> list[list[str]]:
    """The rows (their cells, stripped) of the table whose header row is ``header``."""
    lines = PAGE.read_text().splitlines()
    start = lines.index(header) + 2  # past the header and its |---| line
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    assert rows, f"no rows under {header!r} in {PAGE}"
    return rows


def names(cell: str) -> list[str]:
    """The backticked names in ``cell`` (none for ``—``)."""
    return _NAME.findall(cell)


def access_fields() -> set[str]:
    """The access line's JSON fields, as the page lists them."""
    return {name for row in table("| JSON field | in text | meaning |") for name in names(row[0])}


def metrics() -> dict[str, tuple[str, frozenset[str]]]:
    """Every metric the page lists (as Prometheus names it, ``_total`` included): its type and labels."""
    listed: dict[str, tuple[str, frozenset[str]]] = {}
    for row in table("| metric | type | labels | what it counts |"):
        labels = frozenset(names(row[2]))
        for name in names(row[0]):
            assert name not in listed, f"{name} is listed twice"
            listed[name] = (row[1], labels)
    return listed
