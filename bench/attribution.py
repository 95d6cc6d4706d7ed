"""The cost of exact attribution: ``python -m bench.attribution``.

Exact attribution (``gateway.protocol.attribution``) gives each ``tools/call`` on a legacy
child that may ask a child of its own. This measures what that costs on the stdlib echo
server (``bench/servers/echo.py``, which never asks), at concurrency C with legacy clients:
req/s, p50, and the children the gateway ran, for

- the default (``--child-asks auto``: the child is told it may ask, so a tool's calls get a
  child each until one of them ended asking nothing; ``echo`` then shares, attribution rule 5),
  with ``--pool-max 1`` and ``--pool-max C``;
- ``--child-asks never`` (calls share one child: the behaviour before, for servers that never ask).

It prints one Markdown table; numbers from a shared machine are noisy, compare within a run.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from bench import procs
from bench.load import http_load

CASES = {
    "auto, --pool-max 1": ["--pool-max", "1"],
    "auto, --pool-max C": ["--pool-max", "{C}"],
    "never, --pool-max 1": ["--child-asks", "never", "--pool-max", "1"],
}


def measure(concurrency: int, calls: int, log_dir: Path) -> list[str]:
    rows = []
    for label, flags in CASES.items():
        argv = [flag.replace("{C}", str(concurrency)) for flag in flags]
        with procs.gateway("gateway", log_dir, "--dual-era", "legacy", *argv).start() as gw:
            gw.wait_ready(path="/readyz")
            result = asyncio.run(http_load(gw.port, era="legacy", concurrency=concurrency, calls=calls, max_seconds=60))
            children = len([pid for pid in procs.descendants(gw.pid)])
        rows.append(
            f"| {label} | {concurrency} | {result.rps:,.0f} | {result.percentile_ms(0.5):.2f} | {children} "
            f"| {result.errors + sum(result.wrong.values())} |"
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.attribution", description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--calls", type=int, default=200, help="calls per client")
    options = parser.parse_args(argv)
    print("| legacy clients, echo server | C | req/s | p50 ms | children | errors |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for concurrency in options.concurrency:
            for row in measure(concurrency, options.calls, Path(tmp)):
                print(row, flush=True)


if __name__ == "__main__":
    main()
