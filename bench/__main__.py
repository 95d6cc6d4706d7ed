"""``python -m bench``: measure issue #14's targets and print them as one table with PASS/MISS.

    python -m bench                 # the targets (~3 minutes): medians of 3, peers when installed
    python -m bench --quick         # the same rows from one shorter repetition (~1 minute)
    python -m bench --only load     # some groups only: load (C = 64, both eras, bearer auth,
                                    #   peers, ceiling), c1 (floor, gateway, peers), stream,
                                    #   memory (comma-separated)
    python -m bench --profile       # also py-spy the gateway at C = 64 and print the top frames
    python -m bench --markdown      # also write docs/benchmarks.md from this run
    python -m bench --only profile --save-before   # keep a profile as the page's "before"
    python -m bench --suite full    # the older, wider matrix: C = 1/8/64, pool scaling,
                                    #   --workers, large replies, cold start (also quick, smoke)
    python -m bench --smoke         # = --suite smoke: seconds, no peers (the test suite runs it)
    python -m bench --engine uvicorn,granian   # the same table once per HTTP engine (default:
                                    #   uvicorn, the gateway's own; granian: bench.granian_gateway)

Peers (supergateway, mcp-proxy from npm, mcp-proxy from PyPI, IBM ContextForge's stdio
bridge) are installed by ``bench/install-peers.sh`` into ``bench/.peers/``; a peer that is
not installed is named as such in the table. Every answer of the load runs is checked: each
call echoes a message naming its client and call, and a server that hands an answer to the
wrong client is reported with its count and not compared on speed (``bench/load.py``).
Run on an idle machine: the load average before and after is printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
from pathlib import Path

from bench import procs, report, targets, verdicts
from bench.suite import PLANS, Suite

DEFAULT_OUTPUT = procs.REPO / "docs" / "benchmarks.md"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="the targets from one shorter repetition (~1 minute)")
    size.add_argument("--tiny", action="store_true", help="the targets at toy sizes, no peers (seconds; tests)")
    size.add_argument("--suite", choices=sorted(PLANS), help="the older, wider matrix instead of the targets")
    size.add_argument("--smoke", action="store_true", help="= --suite smoke")
    parser.add_argument("--only", help=f"comma-separated groups of the targets run: {','.join(targets.GROUPS)},profile")
    parser.add_argument("--reps", type=int, help="repetitions of each measurement (medians are reported)")
    parser.add_argument("--no-peers", action="store_true", help="leave the peers out")
    parser.add_argument("--markdown", action="store_true", help="write the targets page to --output")
    parser.add_argument(
        "--output", type=Path, help=f"where the Markdown page goes (targets: default {DEFAULT_OUTPUT}; --suite: none)"
    )
    parser.add_argument("--profile", action="store_true", help="py-spy the gateway under C=64 load, print the top")
    parser.add_argument(
        "--save-before", action="store_true", help="with --profile: keep this profile as the page's 'before'"
    )
    parser.add_argument(
        "--gateway-checkout",
        type=Path,
        help="run the gateway from this checkout (e.g. a git worktree of another commit) instead of this one",
    )
    parser.add_argument(
        "--engine",
        default="uvicorn",
        help=f"comma-separated HTTP engines to serve the gateway with, one table each: {','.join(procs.ENGINES)}",
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the servers' logs (always kept on failure)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.suite = "smoke"
    if args.only is not None:
        groups = tuple(g.strip() for g in args.only.split(",") if g.strip())
        unknown = [g for g in groups if g not in (*targets.GROUPS, "profile")]
        if unknown or not groups:
            parser.error(f"--only takes {', '.join(targets.GROUPS)}, profile; got {args.only!r}")
        args.profile = args.profile or "profile" in groups
        args.only = tuple(g for g in groups if g != "profile")
    if args.save_before and not args.profile:
        parser.error("--save-before needs --profile")
    args.engines = tuple(e.strip() for e in args.engine.split(",") if e.strip())
    if not args.engines or any(e not in procs.ENGINES for e in args.engines):
        parser.error(f"--engine takes {', '.join(procs.ENGINES)} (comma-separated); got {args.engine!r}")
    if len(args.engines) > 1 and (args.markdown or args.output is not None):
        parser.error("--markdown/--output write one engine's page: give one --engine")
    return args


def say(line: str) -> None:
    print(line, flush=True)


def command_line(argv: list[str] | None) -> str:
    return " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])]).strip()


def run_suite(args: argparse.Namespace, argv: list[str] | None, log_dir: Path) -> None:
    """The older matrix: every table printed; the page written only to ``--output``."""
    plan = PLANS[args.suite]
    if args.reps:
        plan = dataclasses.replace(plan, reps=args.reps)
    if args.no_peers:
        plan = dataclasses.replace(plan, peers=False)
    print(
        f"benchmark suite {plan.name!r}, engine {procs.engine_version(procs.ENGINE)}; server logs in {log_dir}",
        flush=True,
    )
    results = Suite(plan, log_dir, say=say).run_all()
    if args.profile:
        from bench.profile import profile_gateway

        profile_gateway(log_dir, say)
    text = report.page(results, command_line(argv))
    print()
    print(text.split("\n## Where", 1)[0])
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
        print(f"wrote {args.output}")


def run_targets(args: argparse.Namespace, argv: list[str] | None, log_dir: Path) -> None:
    plan = targets.QUICK if args.quick else targets.TINY if args.tiny else targets.DEFAULT
    if args.reps:
        plan = dataclasses.replace(plan, reps=args.reps)
    if args.no_peers:
        plan = dataclasses.replace(plan, peers=False)
    groups = targets.GROUPS if args.only is None else args.only
    engine = procs.engine_version(procs.ENGINE)
    print(
        f"issue #14 targets, plan {plan.name!r} ({', '.join(groups)}), engine {engine}; server logs in {log_dir}",
        flush=True,
    )
    results = targets.TargetRun(plan, log_dir, groups, say).run_all(profile=args.profile)
    print()
    print(f"# Engine: {engine}\n")
    print(verdicts.terminal(results))
    print(f"\nload average {results.load_average[0]} before, {results.load_average[1]} after; {results.seconds:.0f} s")
    if args.save_before and results.profile:
        verdicts.PROFILE_BEFORE.write_text(verdicts.profile_record(results))
        print(f"kept this profile as the 'before': {verdicts.PROFILE_BEFORE}")
    if args.markdown or args.output is not None:
        output = args.output or DEFAULT_OUTPUT
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(verdicts.page(results, command_line(argv)))
        print(f"wrote {output}")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.gateway_checkout is not None:
        procs.GATEWAY_CHECKOUT = args.gateway_checkout.resolve()
    log_dir = Path(tempfile.mkdtemp(prefix="mcp-bench-"))
    try:
        for engine in args.engines:
            procs.ENGINE = engine
            if args.suite is not None:
                run_suite(args, argv, log_dir)
            else:
                run_targets(args, argv, log_dir)
    except BaseException:
        print(f"benchmark failed; server logs kept in {log_dir}", file=sys.stderr)
        raise
    if args.keep_logs or args.profile:  # the profile's raw stacks are there
        print(f"server logs kept in {log_dir}")
    else:
        shutil.rmtree(log_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
