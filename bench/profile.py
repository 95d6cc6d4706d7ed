"""``python -m bench --profile`` (or ``python -m bench.profile``): where the gateway's time goes.

Starts a gateway in front of the echo server, drives it with C=64 clients per era, and
samples it with py-spy meanwhile (``py-spy record --format raw``: collapsed stacks). Then
prints, per era, the functions with the most samples on the stack (inclusive) and on top
(self), and the share of each package, so a regression or a fix shows as a number.
py-spy comes from ``bench/install-peers.sh`` (into ``bench/.peers/venv``) or PATH.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from bench import procs
from bench.load import http_load
from bench.suite import run

FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]*)(?::\d+)?\)$")
SAMPLE_RATE = 200
THREAD_ROOT = "Thread._bootstrap"
"""The root frame of every thread but the main one (the event loop's)."""
OWN = ("gateway.http", "gateway.relay", "gateway.stdio", "gateway.protocol", "gateway.ops", "gateway.oauth")
"""Packages whose functions the inclusive list shows (not the entry points: server, cli)."""
SECONDS = 6.0
CONCURRENCY = 64


def py_spy() -> str | None:
    local = procs.PEERS / "venv" / "bin" / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


def package_of(path: str) -> str:
    """``gateway/http/stream.py`` → ``gateway.http.stream``; ``anyio/_backends/x.py`` → ``anyio``."""
    if path.startswith("gateway/"):
        return path.removesuffix(".py").replace("/", ".")
    if path.startswith("<"):
        return path
    return path.split("/", 1)[0].removesuffix(".py")


def frame_name(frame: str) -> tuple[str, str]:
    match = FRAME.match(frame.strip())
    if match is None:
        return frame.strip(), "?"
    path = match["file"]
    return f"{match['func']} ({path.rsplit('/', 1)[-1]})", package_of(path)


def summarize(raw: Path, top: int = 25) -> str:
    inclusive: Counter[str] = Counter()
    owners: dict[str, str] = {}
    self_time: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    total = 0
    threads: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        if stack.startswith(THREAD_ROOT):  # not the event loop: counted apart, by the thread's entry
            entry = next((f for f in stack.split(";") if "threading.py" not in f), "?")
            threads[frame_name(entry)[0]] += count
            continue
        frames = [frame_name(f) for f in stack.split(";") if f and not f.startswith("process ")]
        frames = [f for f in frames if not f[0].startswith("<module>") and "thread (" not in f[0]]
        if not frames:
            continue
        total += count
        for name, package in set(frames):
            inclusive[name] += count
            owners[name] = package
        leaf, package = frames[-1]
        self_time[leaf] += count
        packages[package] += count
    if not total:
        return "(no samples)"
    ours = Counter({name: n for name, n in inclusive.items() if owners[name].startswith(OWN) and n < total * 0.8})
    apart = sum(threads.values())
    lines = [f"{total} samples of the event loop's thread"]
    if apart:
        # a thread blocked in C (e.g. a logging QueueListener in SimpleQueue.get) may be sampled as busy
        named = ", ".join(f"{name} {n}" for name, n in threads.most_common(3))
        lines.append(f"(and {apart} of other threads, left out below: {named})")
    lines += [
        "",
        "inclusive, the gateway's own functions (on the stack; the entry points left out):",
    ]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in ours.most_common(top)]
    lines += ["", "self (on top):"]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in self_time.most_common(top)]
    lines += ["", "self time by package:"]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in packages.most_common(top)]
    return "\n".join(lines)


def profile_gateway(log_dir: Path, say: Callable[[str], None] = print, *flags: str, top: int = 25) -> dict[str, str]:
    """py-spy the gateway under C = 64 load in each era; the summary per era (``top`` frames each)."""
    spy = py_spy()
    if spy is None:
        say("profile: py-spy not found (bench/install-peers.sh installs it, or pip install py-spy); skipped")
        return {}
    summaries: dict[str, str] = {}
    gateway = procs.gateway("gateway-profile", log_dir, *flags)
    with gateway.start():
        gateway.wait_ready()
        for era in ("modern", "legacy"):
            run(http_load(gateway.port, era=era, concurrency=8, calls=50, max_seconds=5))  # warm
            raw = log_dir / f"profile-{era}.txt"
            cmd = [spy, "record", "--pid", str(gateway.pid), "--format", "raw", "--output", str(raw)]
            cmd += ["--rate", str(SAMPLE_RATE), "--duration", str(int(SECONDS)), "--nonblocking"]
            sampler = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(0.5)
            result = run(
                http_load(gateway.port, era=era, concurrency=CONCURRENCY, calls=100_000, max_seconds=SECONDS - 1)
            )
            _, err = sampler.communicate(timeout=30)
            if not raw.exists():
                say(f"profile: py-spy failed: {err.decode(errors='replace')[-300:]}")
                continue
            wrong = sum(result.wrong.values())
            headline = f"{era}, C = {CONCURRENCY}: {result.rps:,.0f} req/s while sampled ({result.errors} errors"
            headline += f", {wrong} wrong answers)" if wrong else ")"
            summaries[era] = headline + "\n" + summarize(raw, top)
            say(f"\nprofile, {summaries[era]}\n(stacks in {raw})")
    return summaries


def main() -> int:
    log_dir = Path(tempfile.mkdtemp(prefix="mcp-bench-profile-"))
    args = sys.argv[1:]
    if args and args[0] == "--gateway-checkout":
        procs.GATEWAY_CHECKOUT = Path(args[1]).resolve()
        args = args[2:]
    profile_gateway(log_dir, print, *args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
