"""``python -m bench.ab``: a paired A/B of gateway checkouts, robust to a noisy machine.

    python -m bench.ab --checkout A --checkout B [--era modern] [--concurrency 64]
                       [--calls N] [--rounds 16]

A shared 2-core machine moves by 10-30 % from one minute to the next, so two runs of
``python -m bench`` in a row hide a 5 % change, and even a same-hour pair can point the wrong
way. Here every checkout's gateway runs at once (each in front of its own echo child), and the
load goes to them in turn, one burst each per round, the order reversed every other round, so
the machine's drift falls on all alike. Each burst is ``calls`` calls per client at
``concurrency`` clients with every answer checked (a wrong one fails the run), and it reads
the gateway's CPU time and its children's from ``/proc``. Printed per checkout: the median
rate and CPU per call (the gateway's, and its child's), and for each checkout after the first
the median of its per-round ratios to the first's, which is the number to read. For
user-space work alone, ``python -m bench.instructions`` counts instructions deterministically;
this one also sees system calls, wake-ups and the child's share.

Each checkout is a tree (a git worktree of another commit, say); the gateway runs from it with
its own directory as the working directory and ``PYTHONPATH``, as ``--gateway-checkout`` does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bench import procs
from bench.load import http_load
from bench.suite import run

ROUNDS = 16
CALLS = 100
CONCURRENCY = 64
BURST_SECONDS = 60.0
"""The most one burst may take (a hung gateway fails the run instead of stalling it)."""


@dataclass
class Burst:
    rate: float
    """Answers per second."""
    cpu_us: float
    """The gateway process's CPU per call, µs."""
    child_cpu_us: float
    """Its children's CPU per call, µs (the echo child, and any launcher)."""


@dataclass
class Arm:
    checkout: Path
    service: procs.Service
    bursts: list[Burst] = field(default_factory=list)


def start(checkout: Path, log_dir: Path) -> procs.Service:
    port = procs.free_port()
    argv = [sys.executable, "-m", "gateway", "--port", str(port), "--", *procs.echo_command()]
    env = {**os.environ, "PYTHONPATH": f"{checkout}{os.pathsep}{procs.REPO}"}
    name = f"gateway {checkout.name or checkout}"
    service = procs.Service(name, argv, port, log_dir, health_path="/readyz", cwd=checkout, env=env)
    service.start()
    service.wait_ready()
    return service


def children_cpu(pid: int) -> float:
    return sum(procs.cpu_of(child) for child in procs.descendants(pid))


async def burst(arm: Arm, era: str, concurrency: int, calls: int) -> Burst:
    service = arm.service
    before = service.cpu_seconds(), children_cpu(service.pid)
    result = await http_load(service.port, era=era, concurrency=concurrency, calls=calls, max_seconds=BURST_SECONDS)
    after = service.cpu_seconds(), children_cpu(service.pid)
    if result.errors or result.wrong or result.ok != concurrency * calls:
        problem = result.first_error or result.first_wrong or f"{result.ok} of {concurrency * calls} answered"
        raise SystemExit(f"{service.name}: {result.errors} errors, wrong answers {result.wrong}: {problem}")
    return Burst(
        rate=result.ok / result.elapsed,
        cpu_us=(after[0] - before[0]) / result.ok * 1e6,
        child_cpu_us=(after[1] - before[1]) / result.ok * 1e6,
    )


async def rounds(arms: list[Arm], era: str, concurrency: int, calls: int, count: int) -> None:
    for arm in arms:  # warm each up: its child started, its code paths taken
        await burst(arm, era, concurrency, max(1, calls // 10))
    for index in range(count):
        for arm in arms if index % 2 == 0 else arms[::-1]:
            arm.bursts.append(await burst(arm, era, concurrency, calls))


def report(arms: list[Arm]) -> str:
    first = arms[0]
    lines = ["| checkout | req/s | gateway CPU µs/call | child CPU µs/call | req/s ÷ first | CPU ÷ first |"]
    lines.append("|---|---|---|---|---|---|")
    for arm in arms:
        rate = statistics.median(b.rate for b in arm.bursts)
        cpu = statistics.median(b.cpu_us for b in arm.bursts)
        child = statistics.median(b.child_cpu_us for b in arm.bursts)
        if arm is first:
            ratios = "| |"
        else:
            pairs = list(zip(arm.bursts, first.bursts, strict=True))
            rate_ratio = statistics.median(b.rate / a.rate for b, a in pairs)
            cpu_ratio = statistics.median(b.cpu_us / a.cpu_us for b, a in pairs if a.cpu_us)
            ratios = f"| {rate_ratio:.3f} | {cpu_ratio:.3f} |"
        lines.append(f"| {arm.checkout} | {rate:,.0f} | {cpu:.1f} | {child:.1f} {ratios}")
    lines.append(
        f"\nmedians of {len(first.bursts)} rounds; the ratios are medians of each round's ratio to the first checkout"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", action="append", type=Path, required=True, help="a tree to run (repeat)")
    parser.add_argument("--era", choices=("modern", "legacy"), default="modern")
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY)
    parser.add_argument("--calls", type=int, default=CALLS, help="calls per client per burst")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args(argv)
    if len(args.checkout) < 2:
        parser.error("give at least two --checkout trees to compare")
    if args.rounds < 1 or args.calls < 1 or args.concurrency < 1:
        parser.error("--rounds, --calls and --concurrency are at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as logs:
        arms: list[Arm] = []
        try:
            for checkout in args.checkout:
                arms.append(Arm(checkout.resolve(), start(checkout.resolve(), Path(logs))))
            run(rounds(arms, args.era, args.concurrency, args.calls, args.rounds))
        finally:
            for arm in arms:
                arm.service.stop()
    print(f"{args.era}, C = {args.concurrency}, {args.calls} calls per client per burst")
    print(report(arms))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
