"""The benchmark still runs end to end: ``python -m bench --smoke`` starts every kind of server
it measures (gateways, no-op calibration server, the floor's pipe), finishes in seconds and
writes its page. It measures nothing worth reading; the real run is ``python -m bench``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SMOKE_DEADLINE = 50.0
"""Seconds the tiny run may take (it needs about 10); under pytest's 60 s backstop."""


def test_the_smoke_run_starts_every_server_and_writes_the_page(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--output", str(page)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=SMOKE_DEADLINE,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = page.read_text()
    for heading in (
        "## Targets",
        "## Load",
        "## Pool scaling",
        "## Workers",
        "## Streaming",
        "## Large replies",
        "## Memory",
    ):
        assert heading in text
    assert "| gateway | modern |" in text
    assert "| gateway | legacy |" in text
    assert "| floor (pipe) | modern |" in text
    gateway_rows = [
        line.split("|")
        for line in text.splitlines()
        if line.startswith(("| gateway | modern |", "| gateway | legacy |"))
    ]
    assert gateway_rows
    assert all(cells[6].strip() == "0" for cells in gateway_rows), gateway_rows  # no errors
    assert "20/20 completed" in text  # every held SSE stream got its answer
