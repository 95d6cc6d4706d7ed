"""The layer rule, the no-cycle rule and the task-ownership rule (scripts/check_layers.py) hold for gateway/."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_layers.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_layers", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_layers"] = module
    spec.loader.exec_module(module)
    return module


layers = load()

# Crossings still being worked off. The set must shrink to empty: a crossing fixed must be
# removed here too, and a new one fails.
KNOWN_CROSSINGS: set[str] = set()
KNOWN_CYCLES: set[str] = set()


def test_no_layer_is_crossed() -> None:
    found = {layers.strip_line(problem) for problem in layers.crossings(layers.graph())}
    assert found == KNOWN_CROSSINGS


def test_there_are_no_import_cycles() -> None:
    found = {" -> ".join(cycle) for cycle in layers.cycles(layers.graph())}
    assert found == KNOWN_CYCLES


def test_the_checker_sees_a_crossing_and_a_cycle() -> None:
    edges = {
        "gateway.http.endpoint": [(3, "gateway.stdio.pool")],
        "gateway.stdio.pool": [(1, "gateway.stdio.child")],
        "gateway.stdio.child": [(9, "gateway.stdio.pool")],
        "gateway.protocol.framing": [(2, "gateway.relay.router")],
    }
    assert layers.crossings(edges) == [
        "gateway.http.endpoint:3 imports gateway.stdio.pool (http may not import stdio)",
        "gateway.protocol.framing:2 imports gateway.relay.router (protocol may not import relay)",
    ]
    assert layers.cycles(edges) == [["gateway.stdio.child", "gateway.stdio.pool"]]


def test_a_function_local_import_counts_and_a_type_checking_one_does_not(tmp_path: Path) -> None:
    source = tmp_path / "gateway" / "http" / "x.py"
    source.parent.mkdir(parents=True)
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from gateway.stdio import child\n"
        "def f():\n    from gateway.stdio import pool\n"
    )
    modules = {"gateway.stdio.child", "gateway.stdio.pool", "gateway.http.x"}
    original = layers.ROOT
    layers.ROOT = tmp_path / "gateway"
    try:
        assert list(layers.imports_of(source, modules)) == [(5, "gateway.stdio.pool")]
    finally:
        layers.ROOT = original


def test_the_protocol_package_is_sans_io() -> None:
    assert layers.impurities() == []


def test_the_purity_check_sees_io_a_clock_and_async(tmp_path: Path) -> None:
    (tmp_path / "protocol").mkdir()
    (tmp_path / "protocol" / "bad.py").write_text(
        "import time\nfrom anyio import sleep\nimport os.path\nasync def f():\n    await g()\n"
    )
    assert layers.impurities(tmp_path) == [
        "bad:1 imports time (gateway.protocol is sans-IO)",
        "bad:2 imports anyio (gateway.protocol is sans-IO)",
        "bad:3 imports os.path (gateway.protocol is sans-IO)",
        "bad:4 is async (gateway.protocol is sans-IO)",
        "bad:5 is async (gateway.protocol is sans-IO)",
    ]


def test_every_task_and_task_group_in_the_gateway_has_an_owner() -> None:
    assert layers.unowned_tasks() == []


def test_the_ownership_check_sees_a_kept_task_group_a_hand_entry_a_dropped_task_and_a_held_lock(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(
        "import asyncio, anyio\n"
        "async def f(self):\n"
        "    group = anyio.create_task_group()\n"
        "    await group.__aenter__()\n"
        "    await self._tg.__aexit__(None, None, None)\n"
        "    asyncio.get_running_loop().create_task(g())\n"
        "    asyncio.ensure_future(g())\n"
        "    async with self._lock:\n"
        "        await g()\n"
    )
    (tmp_path / "good.py").write_text(
        "import asyncio, anyio\n"
        "async def f(self, running):\n"
        "    async with anyio.create_task_group() as tg:\n"
        "        tg.start_soon(g)\n"
        "    await running.__aenter__()\n"  # a context manager of the object's own, not a task group
        "    self._task = asyncio.get_running_loop().create_task(g())\n"  # held: its owner ends it
        "    async with self._lock:\n"
        "        self.count += 1\n"  # decided under the lock, no wait
        "        async def later():\n"
        "            await g()\n"  # defined, not awaited here
    )
    assert layers.unowned_tasks(tmp_path) == [
        "bad:3 makes a task group outside `async with` (enter it there)",
        "bad:4 enters a task group by hand (__aenter__; use `async with`)",
        "bad:5 enters a task group by hand (__aexit__; use `async with`)",
        "bad:6 starts a task nobody holds (create_task; start it in a task group)",
        "bad:7 starts a task nobody holds (ensure_future; start it in a task group)",
        "bad:8 holds a lock across an await (decide under it, wait after)",
    ]
