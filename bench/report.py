"""Tables, target checks and the Markdown page (``docs/benchmarks.md``) from ``Results``."""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime

from bench import procs
from bench.load import Row
from bench.suite import Results, Target

ANALYSIS = procs.BENCH / "analysis.md"


@dataclass(frozen=True)
class Check:
    target: str
    measured: str
    met: bool | None  # None: not measured in this run

    @property
    def verdict(self) -> str:
        return {True: "met", False: "**missed**", None: "not measured"}[self.met]


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:,.{digits}f}"


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def _rps(target: Target | None, era: str, concurrency: int) -> float | None:
    """A target's answers per second, when every answer was right (``bench.load``'s check)."""
    row = target.row(era, concurrency) if target else None
    return row.rps if row and not row.wrong else None


def _best_peer(results: Results, era: str, concurrency: int) -> tuple[str, float] | None:
    best: tuple[str, float] | None = None
    for target in results.targets:
        if target.name in ("gateway", "floor (pipe)") or target.name.startswith("ceiling"):
            continue
        rps = _rps(target, era, concurrency)
        if rps is not None and (best is None or rps > best[1]):
            best = (target.name, rps)
    return best


def checks(results: Results) -> list[Check]:
    """Issue #14's targets as far as the wider matrix measures them (``bench.verdicts`` has
    the full set: bearer auth, CPU per call, streaming)."""
    from bench.verdicts import C1_GAP_MS, CEILING_SHARE, PEER_FACTOR

    out: list[Check] = []
    gateway = results.target("gateway")
    top = max(results.plan.concurrencies)
    label = f"C = {top}"
    for era in ("modern", "legacy"):
        peer = _best_peer(results, era, top)
        mine = _rps(gateway, era, top)
        if peer is None or mine is None:
            out.append(Check(f"{label}, {era}: ≥ {PEER_FACTOR:g}× the best peer's req/s", "no peer measured", None))
        else:
            r = mine / peer[1]
            measured = f"{r:.1f}× ({peer[0]})"
            out.append(Check(f"{label}, {era}: ≥ {PEER_FACTOR:g}× the best peer's req/s", measured, r >= PEER_FACTOR))
    ceiling = _rps(results.target("ceiling (raw)"), "modern", top)
    for era in ("modern", "legacy"):
        share = ratio(_rps(gateway, era, top), ceiling)
        measured = "–" if share is None else f"{share:.0%} of {fmt(ceiling)} req/s"
        met = None if share is None else share >= CEILING_SHARE
        out.append(Check(f"{label}, {era}: ≥ {CEILING_SHARE:.0%} of the load generator's ceiling", measured, met))
    floor = results.target("floor (pipe)")
    floor_row = floor.row("modern", 1) if floor else None
    for era in ("modern", "legacy"):
        row = gateway.row(era, 1) if gateway else None
        if row is None or floor_row is None:
            out.append(Check(f"C = 1, {era}: p50 ≤ floor + {C1_GAP_MS:g} ms", "–", None))
            continue
        gap = row.p50_ms - floor_row.p50_ms
        measured = f"{gap:+.2f} ms ({row.p50_ms:.2f} ms)"
        out.append(Check(f"C = 1, {era}: p50 ≤ floor + {C1_GAP_MS:g} ms", measured, gap <= C1_GAP_MS))
    pool = results.pool
    if 1 in pool and 4 in pool:
        r = pool[4].rps / pool[1].rps if pool[1].rps else 0.0
        out.append(Check("pool 4 vs 1 on the slow backend: ≥ 3.5×", f"{r:.2f}×", r >= 3.5))
    else:
        out.append(Check("pool 4 vs 1 on the slow backend: ≥ 3.5×", "–", None))
    memory = results.memory
    if memory is not None:
        out.append(
            Check(
                f"RSS after {memory.requests:,} requests ≤ 80 MB",
                f"{memory.after_mb:.1f} MB (idle {memory.idle_mb:.1f})",
                memory.after_mb <= 80 and memory.request_errors == 0,
            )
        )
        out.append(
            Check(
                f"RSS with {memory.streams:,} streams open ≤ 200 MB, all completing",
                f"{memory.open_mb:.1f} MB, {memory.streams_completed}/{memory.streams} completed",
                memory.open_mb <= 200 and memory.streams_completed == memory.streams,
            )
        )
    largest = max(results.large) if results.large else None
    if largest is not None:
        gw, fl = results.large[largest]
        r = gw / fl if fl else math.inf
        out.append(Check(f"{largest} MB reply: ≤ 2× the floor's time", f"{r:.2f}× ({gw:.2f} s vs {fl:.2f} s)", r <= 2))
    return out


# -- tables -------------------------------------------------------------------------------


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def load_tables(results: Results) -> str:
    parts = []
    gateway = results.target("gateway")
    ceiling = _rps(results.target("ceiling (raw)"), "modern", max(results.plan.concurrencies))
    for concurrency in results.plan.concurrencies:
        rows = []
        for target in results.targets:
            for era in target.eras:
                if era in target.unsupported:
                    reason = target.unsupported[era].replace("|", "/")
                    rows.append([target.name, era, "n/a", "", "", "", "", "", f"not supported: {reason[:90]}"])
                    continue
                row = target.row(era, concurrency)
                if row is None:
                    continue
                rows.append([target.name, era, *_row_cells(row), _compare(target, era, concurrency, row, gateway)])
        parts.append(
            f"### C = {concurrency} ({results.plan.calls[concurrency]} calls per client)\n\n"
            + table(
                ["server", "era", "req/s", "p50 ms", "p99 ms", "errors", "server cores", "CPU µs/call", "comparison"],
                rows,
            )
        )
    if ceiling:
        parts.append(
            "`server cores` is the CPU the server's own process used during the run (its children "
            "not included), `CPU µs/call` the same per answered call: on a shared machine the "
            "steadier measure of what a call costs. `comparison` is gateway ÷ peer in the same "
            "era, or what share of this row's requests/s the gateway reached."
        )
    return "\n\n".join(parts)


def _row_cells(row: Row) -> list[str]:
    rps = fmt(row.rps) + (" (capped)" if row.capped else "")
    errors = str(row.errors)
    if row.errors and row.first_error:
        errors += f" ({row.first_error[:60].replace('|', '/')})"
    if row.wrong:
        errors += f"; {row.answers_line()}"
    per_call = row.cpu / row.rps * 1e6 if row.cpu is not None and row.rps else None
    return [rps, fmt(row.p50_ms, 2), fmt(row.p99_ms, 2), errors, fmt(row.cpu, 2), fmt(per_call)]


def _compare(target: Target, era: str, concurrency: int, row: Row, gateway: Target | None) -> str:
    if row.wrong:
        return "n/a: wrong answers"
    if target.name == "gateway":
        return ""
    mine = _rps(gateway, era, concurrency) if gateway and era in gateway.eras else None
    if target.name.startswith("ceiling") or target.name == "floor (pipe)":
        shares = [
            f"{e} gateway = {r:.0%}"
            for e in ("modern", "legacy")
            if (r := ratio(_rps(gateway, e, concurrency), row.rps))
        ]
        return ", ".join(shares)
    r = ratio(mine, row.rps)
    return "" if r is None else f"gateway {r:.1f}×"


def pool_table(results: Results) -> str:
    plan = results.plan
    base = results.pool.get(1)
    rows = []
    for size, row in sorted(results.pool.items()):
        ideal = size * 1000 / plan.slow_work_ms
        scale = ratio(row.rps, base.rps if base else None)
        rows.append(
            [
                str(size),
                fmt(row.rps),
                fmt(ideal),
                f"{row.rps / ideal:.0%}",
                fmt(row.p50_ms, 1),
                fmt(row.p99_ms, 1),
                str(row.errors),
                "–" if scale is None else f"{scale:.2f}×",
            ]
        )
    return table(["pool size", "req/s", "ideal req/s", "of ideal", "p50 ms", "p99 ms", "errors", "× pool 1"], rows)


def workers_table(results: Results) -> str:
    """``--workers`` rows, and what a call costs in CPU: the projection to more cores."""
    rows = []
    for (n, era), row in sorted(results.workers.items(), key=lambda item: (item[0][1], item[0][0])):
        base = results.workers.get((1, era))
        scale = ratio(row.rps, base.rps if base else None)
        rows.append([f"--workers {n}", era, *_row_cells(row), "–" if scale is None else f"{scale:.2f}×"])
    if not rows:
        return "(not run)"
    header = ["gateway", "era", "req/s", "p50 ms", "p99 ms", "errors", "gateway cores", "CPU µs/call", "× 1 worker"]
    return table(header, rows)


def stream_table(results: Results) -> str:
    plan = results.plan
    rows = []
    for name, parts in results.stream.items():
        flood, paced = parts["flood"], parts["paced"]
        rows.append(
            [
                name,
                fmt(flood.per_second),
                f"{flood.received}/{flood.sent}",
                fmt(flood.p50_ms, 2),
                fmt(paced.p50_ms, 3),
                fmt(paced.p99_ms, 3),
            ]
        )
    return table(
        [
            "path",
            f"notifications/s ({plan.stream_flood} flat out)",
            "received",
            "flat-out latency p50 ms",
            f"latency p50 ms (every {plan.stream_interval_ms:g} ms)",
            "latency p99 ms",
        ],
        rows,
    )


def large_table(results: Results) -> str:
    rows = []
    for size, (gw, fl) in sorted(results.large.items()):
        rows.append([f"{size} MB", f"{gw:.3f}", f"{fl:.3f}", f"{gw / fl:.2f}×" if fl else "–"])
    return table(["reply", "gateway s", "floor s", "gateway ÷ floor"], rows)


def memory_table(results: Results) -> str:
    m = results.memory
    if m is None:
        return "(not measured)"
    warm_requests = results.plan.memory_requests // 5
    rows = [
        ["idle (ready, no request yet)", fmt(m.idle_mb, 1)],
        [f"after {warm_requests:,} requests (half modern, half legacy)", fmt(m.warm_mb, 1)],
        [f"after {m.requests:,} requests ({m.request_errors} errors)", fmt(m.after_mb, 1)],
        [f"{m.streams_open:,} SSE streams open at once (opened in {m.open_seconds:.2f} s)", fmt(m.open_mb, 1)],
        [f"after they completed ({m.streams_completed:,}/{m.streams:,})", fmt(m.released_mb, 1)],
    ]
    if m.refusal:
        rows.append([f"streams refused: {m.refusal.replace('|', '/')}", ""])
    return (
        table(["gateway process", "RSS MB"], rows)
        + "\n\nThe streams are spread over principals (200 each, named in a header the gateway trusts "
        "from 127.0.0.1): the gateway allows 256 requests in flight per principal."
    )


def cold_table(results: Results) -> str:
    rows = [
        [label, f"{since:.2f}", f"{latency:.3f}", "yes" if ok else "**no**"]
        for label, (since, latency, ok) in results.cold.items()
    ]
    return table(["gateway", "launch → first answer s", "first call s", "answered"], rows)


def check_table(found: list[Check]) -> str:
    return table(["target", "measured", ""], [[c.target, c.measured, c.verdict] for c in found])


# -- the page -----------------------------------------------------------------------------


def machine() -> str:
    model = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} cores ({model}), Linux {platform.release()}, Python {sys.version.split()[0]}"


def gateway_revision() -> str:
    where = procs.GATEWAY_CHECKOUT or procs.REPO
    try:
        commit = subprocess.run(
            ["git", "-C", str(where), "log", "-1", "--format=%h", "--", "gateway"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()  # the last commit that changed the gateway's code
        dirty = subprocess.run(
            ["git", "-C", str(where), "status", "--porcelain", "--", "gateway"], capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return str(where)
    return f"{commit}{' + uncommitted changes under gateway/' if dirty else ''}" + (
        f" (from {where})" if procs.GATEWAY_CHECKOUT else ""
    )


def page(results: Results, command: str) -> str:
    plan = results.plan
    peers = ", ".join(f"{k} {v}" for k, v in procs.peer_versions().items()) or "none installed"
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    sections = [
        "# Benchmarks",
        "Generated by `" + command + "` (see the README's Benchmarks section). Do not edit the "
        "tables by hand: run the benchmark again. The analysis at the end is kept in "
        "`bench/analysis.md`.",
        table(
            ["", ""],
            [
                ["when", when],
                ["machine", machine()],
                ["gateway", gateway_revision()],
                ["peers", peers],
                ["plan", f"{plan.name}: medians of {plan.reps} run(s); took {results.seconds:.0f} s"],
            ],
        ),
        "All servers run as separate processes on 127.0.0.1 in front of the same stdlib echo "
        "server (`bench/servers/echo.py`); the load generator is one asyncio process on uvloop "
        "with raw HTTP/1.1 keep-alive connections (`bench/load.py`). Numbers from a shared "
        "2-core machine are noisy: compare ratios within one run, not across runs.",
        "## Targets\n\n" + check_table(checks(results)),
        "## Load: `tools/call` on the echo server\n\n"
        "Closed loop: each client has one keep-alive connection and sends its next call when the "
        "last one is answered. Legacy clients open a session first (not timed) and delete it "
        "after. Ceiling (raw) is a no-op asyncio HTTP server answering the same JSON: the load "
        "generator's own limit here. Ceiling (uvicorn) is a bare ASGI callable on uvicorn: the "
        "most any uvicorn-based server can do here. The floor drives the echo server over one "
        "pipe, with no HTTP at all.\n\n" + load_tables(results),
        "## Pool scaling: the slow backend\n\n"
        f"Each call waits {plan.slow_work_ms:g} ms in the child, which answers one call at a time; "
        f"the gateway runs with `--pool-min N --pool-max N --max-in-flight 1` and "
        f"{plan.pool_concurrency} clients (modern).\n\n" + pool_table(results),
        f"## Workers: `--workers 1` vs `--workers 2` at C = {max(plan.concurrencies)}\n\n"
        "The echo server behind one gateway process, or two workers sharing its socket (each with "
        "its own child); the same load as above. `gateway cores` counts the supervisor and its "
        "workers, not the children. The load generator, the children and the workers share this "
        "machine's cores, so two workers can only win what one worker leaves idle; on a machine "
        "with spare cores a worker adds about 1,000,000 / (CPU µs per call) requests/s, until "
        "the children or the network are the limit.\n\n" + workers_table(results),
        "## Streaming: progress notifications through one SSE stream\n\n"
        "Flat out: the child writes notifications as fast as it can (the gateway queues up to "
        "16,384 per request; past that, progress for one token is coalesced, counted in *received*). "
        "Paced: one notification "
        "per interval, so the latency is the path's own, not a queue's. Latency is child write "
        "→ client read, both on the machine's monotonic clock.\n\n" + stream_table(results),
        "## Large replies: one result of 1, 10 and 50 MB\n\n"
        "From sending the call to holding the parsed reply (the gateway runs with a larger "
        "`--max-line-bytes`).\n\n" + large_table(results),
        "## Memory: gateway RSS\n\n" + memory_table(results),
        "## Cold start: a server that sleeps before reading stdin\n\n"
        f"The child sleeps {plan.cold_delay:g} s first. Pre-warmed: the client calls once "
        "`/readyz` says ready. On demand: once `/healthz` answers.\n\n" + cold_table(results),
    ]
    if results.notes:
        sections.append("## Notes\n\n" + "\n".join(f"- {note}" for note in results.notes))
    if ANALYSIS.exists():
        sections.append(ANALYSIS.read_text().strip())
    return "\n\n".join(sections) + "\n"
