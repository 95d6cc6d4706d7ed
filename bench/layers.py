"""What a call's overhead at one client is made of: ``python -m bench.layers``.

    python -m bench.layers [--era modern|legacy] [--reps N] [--calls N]

Servers in front of the same echo child, one layer more in each row: the bare protocol bridge
(callbacks only), the same with an asyncio task per request, the bare uvicorn bridge, the
gateway's app on a lean HTTP server of ~100 lines (``bench/lean.py``: no uvicorn), the
gateway as shipped, and ContextForge when installed (``bench/install-peers.sh``). Each
repetition measures the stdio floor, then each server at C = 1 with every other paused; a row
is the median over the repetitions of its p50 minus the floor's, with its share of
ContextForge's and what it adds to the row above. Every answer is checked; a server with a
wrong one or an error is flagged. Issue #42's sixth pass (bench/analysis.md) reads it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench import procs
from bench.load import floor_load, http_load
from bench.suite import run
from bench.targets import paused

MAX_SECONDS = 30.0
"""A run stops sending after this long (a server that stalls cannot hold the bench)."""


def lean(log_dir: Path) -> procs.Service:
    port = procs.free_port()
    argv = [sys.executable, "-m", "bench.lean", "--port", str(port), "--", *procs.echo_command()]
    return procs.Service("lean", argv, port, log_dir)


LAYERS: list[tuple[str, Callable[[Path], procs.Service | None]]] = [
    ("bare protocol bridge: callbacks only", lambda log: procs.bridge(log, "protocol")),
    ("+ an asyncio task per request", lambda log: procs.bridge(log, "task")),
    ("bare uvicorn bridge", procs.bridge),
    ("the gateway's app on a lean HTTP server", lean),
    ("the gateway on uvicorn, as shipped", lambda log: procs.gateway("gateway", log)),
    ("ContextForge", procs.contextforge),  # None when not installed
]


def measure(era: str, reps: int, calls: int, log_dir: Path) -> list[str]:
    """The table's lines."""
    live: dict[str, procs.Service] = {}
    try:
        for name, make in LAYERS:
            service = make(log_dir)
            if service is None:
                continue
            live[name] = service.start()
            service.wait_ready()
        for service in live.values():  # warmed at C = 1, the concurrency measured
            run(http_load(service.port, era=era, concurrency=1, calls=100, max_seconds=MAX_SECONDS))
        over: dict[str, list[float]] = {name: [] for name in live}
        faults: dict[str, int] = dict.fromkeys(live, 0)
        for _ in range(reps):
            with paused(live.values()):
                floor = run(floor_load(procs.echo_command(), concurrency=1, calls=calls, max_seconds=MAX_SECONDS))
            for name, service in live.items():
                with paused(other for other in live.values() if other is not service):
                    found = run(http_load(service.port, era=era, concurrency=1, calls=calls, max_seconds=MAX_SECONDS))
                over[name].append(found.p50_ms - floor.p50_ms)
                faults[name] += found.errors + sum(found.wrong.values())
    finally:
        for service in live.values():
            service.stop()
    medians = {name: statistics.median(values) for name, values in over.items()}
    theirs = medians.get("ContextForge")
    lines = [
        f"{era}, C = 1, {calls} calls a run, medians of {reps} repetition(s)",
        "",
        "| server | over the floor | × ContextForge's | added to the row above | faults |",
        "|---|---|---|---|---|",
    ]
    above: float | None = None
    for name, value in medians.items():
        share = f"{value / theirs:.2f}×" if theirs else "–"
        added = f"{value - above:+.3f} ms" if above is not None and name != "ContextForge" else ""
        fault = str(faults[name]) + (" (not compared)" if faults[name] else "")
        lines.append(f"| {name} | {value:+.3f} ms | {share} | {added} | {fault} |")
        above = value
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description="what a call's overhead at one client is made of")
    parser.add_argument("--era", choices=["modern", "legacy"], default="modern")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-layers-") as log_dir:
        print("\n".join(measure(args.era, args.reps, args.calls, Path(log_dir))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
