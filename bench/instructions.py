"""Instructions per call: the gateway's CPU cost measured deterministically, for A/B work.

    python -m bench.instructions [--checkout PATH ...] [--reference] [--engine uvicorn,granian]

Wall-clock CPU time per call on this machine moves ±15–20 % between runs of the same code
(a shared virtual machine: caches, steal, the load generator and the child on the same two
cores), which hides a 5 % change. This runs each gateway under valgrind's callgrind (its
echo child runs natively: children are not traced), sends real HTTP calls from this process,
zeroes the counters after a warm-up and reads them after the measured calls: user-space
instructions per call, repeatable to about 0.5 %.

- ``C = 1``: one call in flight, so nothing is batched (every read, write and wake is the
  call's own);
- ``C = 16``: calls overlap, as under load (under valgrind the gateway is about 50× slower,
  so more of them overlap than at full speed: a lower bound on batching's help).

Only the calls are counted: the counters are zeroed when the first call is sent and read
after the last answer, so legacy clients' session set-up and teardown are left out (until
2026-12-07 they were in: at C = 16, 48 requests more than the 320 calls, about +75k a call).

System calls are not counted (they run in the kernel), and an instruction is not a fixed
time, so this compares code, not servers; ``python -m bench`` measures the real thing.
``--reference`` adds the two no-op servers of ``bench.noop``: a bare uvicorn ASGI callable
(what any uvicorn app pays per request) and a bare asyncio protocol; and the bare bridges
(``bench.bridge``: that callable piping each call to one shared echo child, ids rewritten; and
the same on a bare asyncio protocol, no HTTP server library, no task per request).
Needs ``valgrind``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.load import http_load
from bench.procs import REPO, echo_command, free_port, http_get_status

STARTUP_TIMEOUT = 300.0
"""Seconds a server under valgrind may take to answer its health path (imports run ~50× slower)."""
WARMUP_CALLS = 10
PLAN = ((1, 300), (16, 20))
"""(concurrency, calls per client) measured for each era."""


def measure(argv: list[str], cwd: Path, health: str, eras: tuple[str, ...], env: dict[str, str]) -> dict[str, int]:
    """Instructions per call for each (concurrency, era) of ``PLAN``, the server started by ``argv``."""
    port = free_port()
    out = Path(tempfile.mkdtemp(prefix="bench-instructions-"))
    command = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}/callgrind.%p",
        "--trace-children=no",
        *[part.replace("{port}", str(port)) for part in argv],
    ]
    with open(out / "server.log", "wb") as log:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while http_get_status(port, health) != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{argv[1:4]} did not start under valgrind; see {out}/server.log")
            time.sleep(0.5)
        results: dict[str, int] = {}
        for concurrency, calls in PLAN:
            for era in eras:
                asyncio.run(http_load(port, era=era, concurrency=concurrency, calls=WARMUP_CALLS, max_seconds=600))
                counters = Counters(proc.pid)
                load = asyncio.run(
                    http_load(port, era=era, concurrency=concurrency, calls=calls, max_seconds=600, cpu_clock=counters)
                )
                if counters.reads != 2:
                    raise RuntimeError(f"{era} C={concurrency}: the calls never started ({load.first_error})")
                if load.errors or load.wrong or not load.ok:
                    wrong = f"; wrong answers {load.wrong} ({load.first_wrong})" if load.wrong else ""
                    raise RuntimeError(f"{era} C={concurrency}: {load.errors} errors ({load.first_error}){wrong}")
                results[f"C={concurrency} {era}"] = last_total(out, proc.pid) // load.ok
        return results
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(out, ignore_errors=True)


class Counters:
    """``http_load``'s CPU clock, turned into callgrind's counters: zeroed when the first call
    is sent (legacy clients have opened their sessions), dumped after the last answer (before
    the sessions are closed). Only the calls are counted, as ``python -m bench`` counts CPU."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.reads = 0

    def __call__(self) -> float:
        control("--zero" if self.reads == 0 else "--dump", self.pid)
        self.reads += 1
        return 0.0


def control(flag: str, pid: int) -> None:
    subprocess.run(["callgrind_control", flag, str(pid)], capture_output=True, check=True, timeout=120)


def last_total(out: Path, pid: int) -> int:
    """The instruction total of the newest dump (``callgrind.PID.N``, N counting up)."""
    dumps = sorted(out.glob(f"callgrind.{pid}.*"), key=lambda path: int(path.suffix[1:]))
    for line in dumps[-1].read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {dumps[-1]}")


def gateway_argv(python: str, engine: str = "uvicorn") -> list[str]:
    module = "gateway" if engine == "uvicorn" else "bench.granian_gateway"
    return [python, "-m", module, "--port", "{port}", "--", *echo_command()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--checkout",
        action="append",
        type=Path,
        help="run the gateway from this checkout (repeatable; a worktree of another commit); default: this one",
    )
    parser.add_argument(
        "--reference", action="store_true", help="also the bare uvicorn and raw no-op servers and the bare bridges"
    )
    parser.add_argument(
        "--engine",
        default="uvicorn",
        help="comma-separated HTTP engines to serve each checkout with: uvicorn (the gateway's own), granian",
    )
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind (callgrind) is not installed: apt-get install valgrind", file=sys.stderr)
        return 2
    # The interpreter itself, not a shim valgrind would trace instead; in a virtual environment
    # its own path (a symlink): resolved, the interpreter would not see the environment's packages.
    python = sys.executable if sys.prefix != sys.base_prefix else os.path.realpath(sys.executable)
    engines = [e.strip() for e in args.engine.split(",") if e.strip()]
    if not engines or any(e not in ("uvicorn", "granian") for e in engines):
        parser.error(f"--engine takes uvicorn, granian (comma-separated); got {args.engine!r}")
    rows: list[tuple[str, dict[str, int]]] = []
    for checkout in args.checkout or [REPO]:
        env = {**os.environ, "PYTHONPATH": f"{checkout}{os.pathsep}{REPO}"}
        for engine in engines:
            result = measure(gateway_argv(python, engine), checkout, "/healthz", ("modern", "legacy"), env)
            rows.append((f"gateway {checkout}" + (f" ({engine})" if len(engines) > 1 else ""), result))
    if args.reference:
        for kind in ("uvicorn", "raw"):
            noop = [python, "-m", "bench.noop", "--kind", kind, "--port", "{port}"]
            rows.append((f"no-op {kind}", measure(noop, REPO, "/readyz", ("modern",), dict(os.environ))))
        for kind, label in (("asgi", "bare bridge"), ("protocol", "bare protocol bridge")):
            bridge = [python, "-m", "bench.bridge", "--kind", kind, "--port", "{port}", "--", *echo_command()]
            rows.append((label, measure(bridge, REPO, "/readyz", ("modern", "legacy"), dict(os.environ))))
    keys = {key for _, result in rows for key in result}
    columns = sorted(keys, key=lambda k: (int(k[2:].split()[0]), "legacy" in k))  # "C=16 modern": by C, modern first
    print("| server | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for name, result in rows:
        cells = [f"{result[c] / 1000:,.0f}k" if c in result else "–" for c in columns]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\ninstructions per call (user space, callgrind); lower is better")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
