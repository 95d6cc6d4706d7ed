"""What kept task outcomes cost in memory, against what the task store counts (issue #38 item 5).

``python -m bench.task_memory`` keeps 64 outcomes of about 1.2 MiB each (a result of 10,000
small content items, parsed from a child's reply line as the gateway parses it), four rounds,
each round's outcomes replacing the last's as a turning store does, and prints per round the
bytes the store counts (``Task.size``: the serialized outcome), the process's RSS growth and
the bytes Python's allocator holds (``tracemalloc``). ``--parsed`` keeps the parsed results
instead, as the store did before (for the comparison in docs/bridging.md).
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc
from typing import Any

import orjson

from gateway.protocol import tasks as rules
from gateway.protocol.tasks import Task

OUTCOMES = 64
ROUNDS = 4
ITEMS = 10_000


def rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def reply_line(n: int) -> bytes:
    items = [{"type": "text", "text": f"row {n}-{i} " + "x" * 90} for i in range(ITEMS)]
    return orjson.dumps({"jsonrpc": "2.0", "id": n, "result": {"content": items}})


def keep(n: int, parsed: bool) -> tuple[Any, int]:
    result = orjson.loads(reply_line(n))["result"]
    if parsed:
        return result, len(orjson.dumps(result))
    task = Task(f"t.{n}", "p", "s", 0.0, rules.DEFAULT_TTL)
    task.complete(result, 1.0)
    return task, task.size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parsed", action="store_true", help="keep parsed results (the store before)")
    parser.add_argument("--trace", action="store_true", help="also count the allocator's bytes (slower)")
    args = parser.parse_args()
    gc.collect()
    before = rss()
    if args.trace:
        tracemalloc.start()
    kept: dict[int, tuple[Any, int]] = {}
    for round_ in range(ROUNDS):
        for n in range(OUTCOMES):
            kept[n] = keep(round_ * OUTCOMES + n, args.parsed)
        gc.collect()
        counted = sum(size for _, size in kept.values())
        traced = f", allocator {tracemalloc.get_traced_memory()[0] / 2**20:.1f} MiB" if args.trace else ""
        print(f"round {round_}: counted {counted / 2**20:.1f} MiB, RSS +{(rss() - before) / 2**20:.1f} MiB{traced}")


if __name__ == "__main__":
    main()
