"""``--help`` and the subcommands' help import only what they use (issue #41 item 7).

Each case runs ``python -X importtime -m gateway …`` in a fresh interpreter (only a new
process starts with an empty ``sys.modules``) and reads the top-level package of every
import from the ``import time: self | cumulative | package`` lines on stderr. The settings
and the command line read their defaults from light modules (``gateway.http.edge_settings``,
``gateway.relay.server_config``, ``gateway.protocol.*``); the server, the edge and the relay
are imported only once the arguments are parsed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_STACK = frozenset({"uvicorn", "starlette", "jwt", "cryptography"})
"""What only serving needs: the ASGI server, the framework, and the token checks (PyJWT over
``cryptography``, about 50 ms of imports; the settings read ``gateway.oauth.policy``)."""


def imported_packages(*args: str) -> tuple[set[str], str]:
    """The top-level packages ``python -m gateway ARGS`` imports, and what it printed."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        "COLUMNS": "100",
    }
    env.pop("PYTHONIMPORTTIME", None)  # -X importtime below is the one switch
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gateway", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=env,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    packages = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            packages.add(name.split(".", 1)[0])
    assert "gateway" in packages, "no -X importtime lines on stderr"
    return packages, done.stdout


@pytest.mark.parametrize(
    ("args", "forbidden"),
    [
        (("--help",), SERVER_STACK | {"httpx"}),
        (("--help-all",), SERVER_STACK | {"httpx"}),
        (("--version",), SERVER_STACK | {"httpx"}),
        (("call", "--help"), SERVER_STACK),  # call speaks HTTP: httpx is its own
        (("inspect", "--help"), SERVER_STACK),
    ],
    ids=["help", "help-all", "version", "call-help", "inspect-help"],
)
def test_help_and_version_import_no_server(args: tuple[str, ...], forbidden: frozenset[str]) -> None:
    packages, printed = imported_packages(*args)
    assert printed.strip(), "printed nothing: the command did not run"
    assert not packages & forbidden, f"{' '.join(args)} imported {sorted(packages & forbidden)}"
