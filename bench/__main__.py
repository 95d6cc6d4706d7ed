"""``python -m bench``: run the benchmarks, print the tables, write ``docs/benchmarks.md``.

    python -m bench              # full run (~5 minutes): medians of 3 runs, peers when installed
    python -m bench --quick      # one small run of everything (~1 minute)
    python -m bench --smoke      # seconds; what the test suite runs (no peers, tiny sizes)

Peers (supergateway, mcp-proxy) are installed by ``bench/install-peers.sh`` into
``bench/.peers/``; without them their rows are left out. ``--profile`` also records the
gateway under the C=64 load with py-spy (``pip install py-spy``) and prints the hottest
functions.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
from pathlib import Path

from bench import procs, report
from bench.suite import PLANS, Suite

DEFAULT_OUTPUT = procs.REPO / "docs" / "benchmarks.md"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="one small run of everything (~1 minute)")
    size.add_argument("--smoke", action="store_true", help="a tiny run (seconds), no peers: proves the bench works")
    parser.add_argument("--reps", type=int, help="repetitions of each measurement (medians are reported)")
    parser.add_argument("--no-peers", action="store_true", help="leave supergateway and mcp-proxy out")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where to write the Markdown page")
    parser.add_argument("--no-write", action="store_true", help="print the tables only")
    parser.add_argument("--profile", action="store_true", help="py-spy the gateway under C=64 load, print the top")
    parser.add_argument(
        "--gateway-checkout",
        type=Path,
        help="run the gateway from this checkout (e.g. a git worktree of another commit) instead of this one",
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the servers' logs (always kept on failure)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    plan = PLANS["smoke" if args.smoke else "quick" if args.quick else "full"]
    if args.reps:
        plan = dataclasses.replace(plan, reps=args.reps)
    if args.no_peers:
        plan = dataclasses.replace(plan, peers=False)
    if args.gateway_checkout is not None:
        procs.GATEWAY_CHECKOUT = args.gateway_checkout.resolve()
    log_dir = Path(tempfile.mkdtemp(prefix="mcp-bench-"))
    command = " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])]).strip()
    print(f"benchmark plan {plan.name!r}; server logs in {log_dir}", flush=True)
    suite = Suite(plan, log_dir, say=lambda line: print(line, flush=True))
    try:
        results = suite.run_all()
        if args.profile:
            from bench.profile import profile_gateway

            profile_gateway(log_dir, say=lambda line: print(line, flush=True))
    except BaseException:
        print(f"benchmark failed; server logs kept in {log_dir}", file=sys.stderr)
        raise
    text = report.page(results, command)
    print()
    print(text.split("\n## Where", 1)[0])
    if not args.no_write:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
        print(f"wrote {args.output}")
    if args.keep_logs or args.profile:  # the profile's raw stacks are there
        print(f"server logs kept in {log_dir}")
    else:
        shutil.rmtree(log_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
