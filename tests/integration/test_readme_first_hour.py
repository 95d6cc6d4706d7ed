"""A new user's first hour, exactly as the README says: expose an npm server, call a tool.

The commands are read from the README (between the first-hour markers), so the test and
the documentation cannot drift apart; only the port and the directory are substituted.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from anyio.streams.text import TextReceiveStream

from bench.procs import free_port
from tests.conftest import MACHINE_WIDE

pytestmark = [pytest.mark.anyio, pytest.mark.npm, MACHINE_WIDE]  # the gateway binds a picked port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SCRIPTS = Path(sys.executable).parent  # the venv (or interpreter) the package is installed in


def readme_commands() -> list[list[str]]:
    text = README.read_text()
    block = re.search(r"<!-- first-hour:start -->\s*```bash\n(.*?)```\s*<!-- first-hour:end -->", text, re.S)
    assert block, "README lost its first-hour block"
    return [shlex.split(line) for line in block.group(1).strip().splitlines()]


@pytest.fixture
def npx_available() -> None:
    if shutil.which("npx") is None:
        pytest.skip("npx is not installed (Node.js); CI installs it with the npm tier")


@pytest.mark.usefixtures("npx_available")
async def test_the_readme_first_hour_steps_work_as_printed(tmp_path: Path) -> None:
    serve, call = readme_commands()
    assert serve[0] == call[0] == "mcp-stdio-gateway"
    (tmp_path / "hello-from-the-readme.txt").write_text("hi")
    port = str(free_port())

    def adapt(argv: list[str]) -> list[str]:
        out = [str(SCRIPTS / argv[0])]
        for arg in argv[1:]:
            arg = arg.replace("8000", port)
            out.append(str(tmp_path) if arg == "/tmp" else arg.replace("path=/tmp", f"path={tmp_path}"))
        return out

    env = {**os.environ, "NO_COLOR": "1"}
    with anyio.fail_after(150):
        async with (
            await anyio.open_process(adapt(serve), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as gateway,
            anyio.create_task_group() as logs,
        ):
            listening = anyio.Event()

            async def read_log() -> None:
                """The gateway's log, read to its end (a full pipe would block it); ``listening``
                once it says where it runs."""
                assert gateway.stderr is not None
                seen = ""
                async for chunk in TextReceiveStream(gateway.stderr):
                    seen = (seen + chunk)[-4096:]
                    if "running on http://" in seen:
                        listening.set()

            logs.start_soon(read_log)
            try:
                # The gateway listens, then `call` waits for the child (npx may download first).
                await listening.wait()
                result = await anyio.run_process(adapt(call), check=False, env=env)
                output = result.stdout.decode()
                assert result.returncode == 0, result.stderr.decode()
                assert "hello-from-the-readme.txt" in output
            finally:
                gateway.terminate()
                assert await gateway.wait() == 0
