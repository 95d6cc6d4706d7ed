"""The layer rule and the no-cycle rule (scripts/check_layers.py) hold for gateway/."""

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
KNOWN_CROSSINGS: set[str] = {
    "gateway.http.endpoint imports gateway.stdio.ask",
    "gateway.http.endpoint imports gateway.stdio.pool",
    "gateway.http.listen imports gateway.stdio.child",
    "gateway.http.listen imports gateway.stdio.pool",
    "gateway.http.session_listen imports gateway.stdio.child",
    "gateway.tools.call.command imports gateway.configfile",
}
KNOWN_CYCLES: set[str] = {
    "gateway.stdio.child -> gateway.stdio.handshake",
    "gateway.server -> gateway.workers",
}


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
