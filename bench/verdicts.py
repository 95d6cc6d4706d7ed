"""Issue #14's targets as rows with PASS/MISS, the detail tables, and ``docs/benchmarks.md``.

Pure: everything here reads a ``TargetResults`` and returns text, so the arithmetic and the
verdicts are unit-tested without running anything (``tests/test_bench_smoke.py``).
"""

from __future__ import annotations

import math
import os
import platform
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata

from bench import procs
from bench.load import Row
from bench.report import gateway_revision, table
from bench.targets import (
    BRIDGE,
    BRIDGES,
    C1_MAX_SECONDS,
    CEILING,
    FLOOR,
    GATEWAY,
    GATEWAYS,
    PROTOCOL_BRIDGE,
    YARDSTICKS,
    TargetResults,
    load_average,
)

PEER_FACTOR = 3.0
"""The gateway's req/s at C = 64 over the best peer's, in the same era."""
CEILING_SHARE = 0.30
"""The gateway's req/s at C = 64 as a share of the raw ceiling's."""
CPU_BUDGET_US = 150.0
"""The gateway process's CPU per call at C = 64."""
C1_GAP_MS = 0.3
"""C = 1 p50 over the stdio floor's."""
C1_PEER_SHARE = 0.5
"""The gateway's C = 1 overhead (p50 over the floor's) as a share of the best correct peer's."""
STEADY_MB = 80.0
STREAMS_MB = 200.0
PROFILE_BEFORE = procs.BENCH / "profile-before.md"
"""The profile kept as "before" (``python -m bench --profile --save-before``)."""
ANALYSIS = procs.BENCH / "analysis.md"


def at_least(value: float, goal: float) -> bool:
    """``value >= goal``, forgiving float rounding (3,000 / 1,000 req/s is 3×)."""
    return value >= goal - 1e-9 * max(1.0, abs(goal))


def at_most(value: float, goal: float) -> bool:
    return value <= goal + 1e-9 * max(1.0, abs(goal))


@dataclass(frozen=True)
class Verdict:
    target: str
    measured: str
    goal: str
    passed: bool | None
    """None: not measured in this run."""

    @property
    def label(self) -> str:
        return {True: "PASS", False: "MISS", None: "n/a"}[self.passed]


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None or math.isnan(value):
        return "–"
    return f"{value:,.{digits}f}"


def cpu_us(row: Row | None) -> float | None:
    """CPU µs per answered call (``Row.cpu`` is cores: CPU seconds per wall second)."""
    if row is None or row.cpu is None or not row.rps:
        return None
    return row.cpu / row.rps * 1e6


WRONG_ANSWERS = "n/a: wrong answers"
"""What a server whose answers were not all right gets instead of a speed ratio."""


def load_row(results: TargetResults, name: str, era: str) -> Row | None:
    server = results.servers.get(name)
    return server.row(era) if server is not None else None


def rps(results: TargetResults, name: str, era: str) -> float | None:
    """Answers per second, only for a server that answered every call right: speed is not
    compared for one that hands answers to the wrong client (``bench.load``'s answer check)."""
    row = load_row(results, name, era)
    return row.rps if row is not None and row.ok and not row.wrong else None


def wrong_peers(results: TargetResults, era: str) -> list[str]:
    """The peers measured in ``era`` that were left out of the comparison for wrong answers."""
    found = []
    for name in results.servers:
        row = load_row(results, name, era)
        if name not in GATEWAYS and name not in YARDSTICKS and row is not None and row.wrong:
            found.append(name)
    return found


def best_peer(results: TargetResults, era: str) -> tuple[str, float] | None:
    """The fastest peer in ``era`` among those whose every answer was right."""
    best: tuple[str, float] | None = None
    for name in results.servers:
        if name in GATEWAYS or name in YARDSTICKS:
            continue
        found = rps(results, name, era)
        if found is not None and (best is None or found > best[1]):
            best = (name, found)
    return best


def load_verdicts(results: TargetResults) -> list[Verdict]:
    out: list[Verdict] = []
    c = f"C = {results.plan.concurrency}"
    ceiling = rps(results, CEILING, "modern")
    for name in GATEWAYS:
        flags = "default flags" if name == GATEWAY else "bearer auth"
        server = results.servers.get(name)
        for era in ("modern", "legacy"):
            where = f"{c}, {era}, {flags}"
            own = load_row(results, name, era)
            if own is None or not own.calls:
                out.append(Verdict(f"{where}: every answer right", "not measured", "all right", None))
            else:
                out.append(Verdict(f"{where}: every answer right", own.answers_line(), "all right", not own.wrong))
            mine = rps(results, name, era)
            peer = best_peer(results, era)
            left_out = wrong_peers(results, era)
            aside = f"; not compared, wrong answers: {', '.join(left_out)}" if left_out else ""
            if mine is None or peer is None:
                if own is not None and own.wrong:
                    why, met = WRONG_ANSWERS, False
                else:
                    why, met = ("no peer measured" if mine is not None else "not measured"), None
                out.append(Verdict(f"{where}: vs the best peer", why + aside, f"≥ {PEER_FACTOR:g}×", met))
            else:
                factor = mine / peer[1]
                measured = f"{factor:.2f}× ({fmt(mine)} vs {peer[0]} {fmt(peer[1])} req/s{aside})"
                met = at_least(factor, PEER_FACTOR)
                out.append(Verdict(f"{where}: vs the best peer", measured, f"≥ {PEER_FACTOR:g}×", met))
            if mine is None or not ceiling:
                out.append(Verdict(f"{where}: share of the raw ceiling", "–", f"≥ {CEILING_SHARE:.0%}", None))
            else:
                share = mine / ceiling
                measured = f"{share:.1%} ({fmt(mine)} of {fmt(ceiling)} req/s)"
                met = at_least(share, CEILING_SHARE)
                out.append(Verdict(f"{where}: share of the raw ceiling", measured, f"≥ {CEILING_SHARE:.0%}", met))
            per_call = cpu_us(server.row(era) if server is not None else None)
            out.append(
                Verdict(
                    f"{where}: gateway CPU per call",
                    "–" if per_call is None else f"{per_call:,.0f} µs",
                    f"≤ {CPU_BUDGET_US:g} µs",
                    None if per_call is None else at_most(per_call, CPU_BUDGET_US),
                )
            )
    return out


BARE_BRIDGE = (
    "The bare bridges (`bench/bridge.py`) are yardsticks, never peers: each rewrites ids and "
    "pipes each call to one shared echo child, with no checks, sessions, pool, cancellation, "
    "bounds or logs. `bare uvicorn` is a bare ASGI callable on uvicorn: the least a correct "
    "gateway on uvicorn does per call. `bare protocol` is a bare asyncio protocol with no HTTP "
    "server library and no task per request (the line written from the socket's callback, the "
    "answer from the pipe's): the least any correct gateway on the event loop does per call."
)


def c1_peer_row(results: TargetResults, name: str, era: str) -> Row | None:
    server = results.c1_peers.get(name)
    return server.row(era) if server is not None else None


def c1_faults(row: Row) -> list[str]:
    """Why a C = 1 row may not be compared: its wrong answers, its errors (none: it may)."""
    return [why for why, found in (("wrong answers", row.wrong), ("errors", row.errors)) if found]


def c1_left_out(results: TargetResults, era: str) -> list[str]:
    """The peers measured at C = 1 in ``era`` that are not compared, each with why."""
    found = []
    for name in results.c1_peers:
        row = c1_peer_row(results, name, era)
        if name not in BRIDGES and row is not None and (faults := c1_faults(row)):
            found.append(f"{name} ({', '.join(faults)})")
    return found


def c1_best_peer(results: TargetResults, era: str) -> tuple[str, float] | None:
    """The peer with the smallest C = 1 overhead over the floor (p50 − the floor's p50) in
    ``era``, among those whose every answer was right, without errors."""
    floor = results.c1.get(FLOOR)
    if floor is None or not floor.ok:
        return None
    best: tuple[str, float] | None = None
    for name in results.c1_peers:
        row = c1_peer_row(results, name, era)
        if name in BRIDGES or row is None or not row.ok or c1_faults(row) or math.isnan(row.p50_ms):
            continue
        overhead = row.p50_ms - floor.p50_ms
        if best is None or overhead < best[1]:
            best = (name, overhead)
    return best


def c1_verdicts(results: TargetResults) -> list[Verdict]:
    out = []
    floor = results.c1.get(FLOOR)
    for era in ("modern", "legacy"):
        row = results.c1.get(era)
        goal = f"≤ floor + {C1_GAP_MS:g} ms"
        if row is None or floor is None or not row.ok:
            out.append(Verdict(f"C = 1, {era}: p50", "–", goal, None))
        else:
            gap = row.p50_ms - floor.p50_ms
            measured = f"{row.p50_ms:.3f} ms = floor {floor.p50_ms:.3f} {gap:+.3f} ms"
            if row.wrong:
                measured += f"; {row.answers_line()}"
            met = at_most(gap, C1_GAP_MS) and row.errors == 0 and not row.wrong
            out.append(Verdict(f"C = 1, {era}: p50", measured, goal, met))
        out.append(_c1_peer_verdict(results, era))
    return out


def _c1_peer_verdict(results: TargetResults, era: str) -> Verdict:
    """The gateway's overhead over the floor against half the best correct peer's (issue #42)."""
    name = f"C = 1, {era}: overhead vs the best correct peer"
    goal = "≤ ½ the best correct peer's"
    floor = results.c1.get(FLOOR)
    row = results.c1.get(era)
    left_out = c1_left_out(results, era)
    aside = f"; not compared: {', '.join(left_out)}" if left_out else ""
    if row is None or floor is None or not row.ok or not floor.ok:
        return Verdict(name, "–" + aside, goal, None)
    if faults := c1_faults(row):
        return Verdict(name, f"n/a: {' and '.join(faults)}" + aside, goal, False)
    peer = c1_best_peer(results, era)
    if peer is None:
        return Verdict(name, ("no correct peer measured" if left_out else "no peer measured") + aside, goal, None)
    mine = row.p50_ms - floor.p50_ms
    theirs = peer[1]
    share = f" ({mine / theirs:.2f}× its overhead)" if theirs > 0 else ""
    bare = "".join(
        f"; {label} {bridge.p50_ms - floor.p50_ms:+.3f} ms"
        for label, name in (("bare bridge", BRIDGE), ("bare protocol bridge", PROTOCOL_BRIDGE))
        if (bridge := c1_peer_row(results, name, era)) is not None and bridge.ok
    )
    measured = f"{mine:+.3f} ms vs {peer[0]} {theirs:+.3f} ms{share}{bare}{aside}"
    return Verdict(name, measured, goal, at_most(mine, C1_PEER_SHARE * theirs))


def stream_verdicts(results: TargetResults) -> list[Verdict]:
    return [_stream_verdict(results), _flood_verdict(results)]


def _stream_verdict(results: TargetResults) -> Verdict:
    """Every one of the progress notifications the child writes flat out, and the result."""
    s = results.stream
    name = f"streaming: {results.plan.stream_steps:,} progress written flat out"
    goal = "all delivered + result"
    if s is None:
        return Verdict(name, "–", goal, None)
    measured = f"{s.received:,}/{s.sent:,} at {fmt(s.per_second)}/s, result {'arrived' if s.final else 'MISSING'}"
    if s.floor_per_second:
        measured += f" (floor {fmt(s.floor_per_second)}/s)"
    return Verdict(name, measured, goal, s.received == s.sent and s.final)


def _flood_verdict(results: TargetResults) -> Verdict:
    """Past what a reader keeps up with, progress may be coalesced; log messages and the result
    must all arrive."""
    plan = results.plan
    logs = plan.flood_steps // plan.flood_log_every
    name = f"streaming: {plan.flood_steps:,} progress + {logs:,} log messages flat out"
    goal = "every log message + result"
    f = results.flood
    if f is None:
        return Verdict(name, "–", goal, None)
    measured = (
        f"{f.logs:,}/{logs:,} log messages, result {'arrived' if f.final else 'MISSING'}; "
        f"progress {f.received:,}/{f.sent:,} (may coalesce) at {fmt(f.per_second)}/s"
    )
    return Verdict(name, measured, goal, f.logs == logs and f.final)


def memory_verdicts(results: TargetResults) -> list[Verdict]:
    m = results.memory
    steady_name = "memory: gateway RSS steady"
    streams_name = f"memory: gateway RSS, {results.plan.memory_streams:,} streams open"
    if m is None:
        return [
            Verdict(steady_name, "–", f"≤ {STEADY_MB:g} MB", None),
            Verdict(streams_name, "–", f"≤ {STREAMS_MB:g} MB", None),
        ]
    steady = f"{m.steady_mb:.1f} MB after {m.requests:,} requests ({m.errors} errors; idle {m.idle_mb:.1f})"
    streams = f"{m.open_mb:.1f} MB; {m.streams_completed:,}/{m.streams:,} completed"
    return [
        Verdict(steady_name, steady, f"≤ {STEADY_MB:g} MB", at_most(m.steady_mb, STEADY_MB) and m.errors == 0),
        Verdict(
            streams_name,
            streams + (f"; {m.refusal}" if m.refusal else ""),
            f"≤ {STREAMS_MB:g} MB, all complete",
            at_most(m.open_mb, STREAMS_MB) and m.streams_completed == m.streams,
        ),
    ]


def verdicts(results: TargetResults) -> list[Verdict]:
    groups = results.groups
    out: list[Verdict] = []
    if "load" in groups:
        out += load_verdicts(results)
    if "c1" in groups:
        out += c1_verdicts(results)
    if "stream" in groups:
        out += stream_verdicts(results)
    if "memory" in groups:
        out += memory_verdicts(results)
    return out


def _cell(text: str) -> str:
    return text.replace("|", "/")


def targets_table(found: list[Verdict]) -> str:
    rows = [[_cell(v.target), _cell(v.measured), v.goal, v.label] for v in found]
    passed = sum(1 for v in found if v.passed)
    missed = sum(1 for v in found if v.passed is False)
    return table(["target", "measured", "goal", ""], rows) + f"\n\n{passed} PASS, {missed} MISS of {len(found)} rows."


def load_table(results: TargetResults) -> str:
    """Every server of the load group, both eras, with the gateway's ratio to it."""
    rows = []
    for name, server in results.servers.items():
        if server.problem is not None:
            rows.append([name, "–", server.problem, "", "", "", "", "", "", ""])
            continue
        memory = f"{fmt(server.rss_mb)} (+{fmt(server.children_rss_mb)})" if server.rss_mb is not None else "–"
        for era in server.eras:
            if era in server.unsupported:
                reason = _cell(server.unsupported[era])[:90]
                rows.append([name, era, f"not supported: {reason}", "", "", "", "", "", memory, ""])
                continue
            row = server.row(era)
            if row is None:
                continue
            errors = str(row.errors) + (f" ({_cell(row.first_error[:50])})" if row.errors and row.first_error else "")
            mine = rps(results, GATEWAY, era) if name not in GATEWAYS else None
            versus = f"gateway {mine / row.rps:.2f}×" if mine and row.rps else ""
            if name == CEILING:
                mine_by_era = {e: rps(results, GATEWAY, e) for e in ("modern", "legacy")}
                versus = ", ".join(f"{e} gateway = {g / row.rps:.1%}" for e, g in mine_by_era.items() if g)
            elif name in BRIDGES and mine:
                versus = f"yardstick: gateway = {mine / row.rps:.1%}"
            if row.wrong:
                versus = WRONG_ANSWERS
            rows.append(
                [
                    name,
                    era,
                    fmt(row.rps) + (" (capped)" if row.capped else ""),
                    fmt(row.p50_ms, 2),
                    fmt(row.p99_ms, 2),
                    errors,
                    f"{row.ok:,}/{row.calls:,}",
                    fmt(cpu_us(row)),
                    memory,
                    versus,
                ]
            )
    header = [
        "server",
        "era",
        "req/s",
        "p50 ms",
        "p99 ms",
        "errors",
        "answers right",
        "CPU µs/call",
        "RSS MB (+children)",
        "comparison",
    ]
    return table(header, rows)


def answers_section(results: TargetResults) -> str:
    """Every server's answer check, one line per era: right, or how many went wrong and how."""
    lines = []
    for name, server in results.servers.items():
        for era in server.eras:
            row = server.row(era)
            if row is None or not row.calls:
                continue
            line = f"- {name}, {era}: {row.answers_line()}"
            if row.wrong and row.first_wrong:
                sample = row.first_wrong[:140].replace("`", "'")
                line += f"; first: `{sample}`"
            lines.append(line)
    return "\n".join(lines)


def c1_table(results: TargetResults) -> str:
    """The floor, the gateway's eras and every peer's at C = 1; ``over floor`` is a row's p50
    minus the floor's, the overhead the half-overhead target compares."""
    names = {FLOOR: FLOOR, "modern": "gateway, modern", "legacy": "gateway, legacy"}
    floor = results.c1.get(FLOOR)
    rows = [_c1_cells(names[key], row, None if key == FLOOR else floor) for key, row in results.c1.items()]
    for name, server in results.c1_peers.items():
        if server.problem is not None:
            rows.append([name, server.problem, "", "", "", "", "", ""])
            continue
        for era in server.eras:
            if era in server.unsupported:
                rows.append([f"{name}, {era}", f"not supported: {_cell(server.unsupported[era])[:90]}"] + [""] * 6)
                continue
            row = server.row(era)
            if row is not None:
                rows.append(_c1_cells(f"{name}, {era}", row, floor, compared=not c1_faults(row)))
    header = ["path", "req/s", "p50 ms", "over floor", "p99 ms", "errors", "answers right", "CPU µs/call"]
    return table(header, rows)


def _c1_cells(path: str, row: Row, floor: Row | None, compared: bool = True) -> list[str]:
    """One C = 1 row; ``floor`` None for the floor's own (nothing over it)."""
    over = ""
    if floor is not None and not math.isnan(row.p50_ms) and not math.isnan(floor.p50_ms):
        over = f"{row.p50_ms - floor.p50_ms:+.3f} ms" + ("" if compared else " (not compared)")
    errors = str(row.errors) + (f" ({_cell(row.first_error[:50])})" if row.errors and row.first_error else "")
    return [
        path,
        fmt(row.rps) + (" (capped)" if row.capped else ""),
        fmt(row.p50_ms, 3),
        over,
        fmt(row.p99_ms, 3),
        errors,
        f"{row.ok:,}/{row.calls:,}",
        fmt(cpu_us(row)),
    ]


def terminal(results: TargetResults) -> str:
    """What ``python -m bench`` prints: the targets table, then the load rows it came from."""
    parts = [f"## Targets (issue #14), plan {results.plan.name}\n\n" + targets_table(verdicts(results))]
    if (warning := busy_warning(results)) is not None:
        parts.append(warning)
    if results.servers:
        parts.append(f"## Load at C = {results.plan.concurrency}\n\n" + load_table(results))
        parts.append("## Answers checked\n\n" + answers_section(results))
    if results.c1:
        parts.append("## C = 1\n\n" + c1_table(results))
    return "\n\n".join(parts)


# -- the page --------------------------------------------------------------------------------


def versions() -> str:
    found = []
    for package in ("uvicorn", "httptools", "uvloop", "anyio", "starlette", "orjson"):
        try:
            found.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            continue
    return f"Python {sys.version.split()[0]}, " + ", ".join(found)


def machine() -> str:
    model = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} cores ({model}), Linux {platform.release()}"


def busy_warning(results: TargetResults) -> str | None:
    """A line for a run on a machine that was not idle: its load average before the run (the
    run itself keeps about two cores busy) at or above its cores."""
    cores = os.cpu_count() or 1
    try:
        before = float(results.load_average[0])
    except ValueError:
        return None
    if before < cores:
        return None
    return (
        f"**Busy machine:** load average {before:g} on {cores} cores before this run, so "
        "every server got a fraction of a core and the numbers read low and noisy; the targets "
        "are for an idle machine. Rerun there before reading a verdict."
    )


def profile_section(results: TargetResults) -> str:
    before = PROFILE_BEFORE.read_text().strip() if PROFILE_BEFORE.exists() else "(none kept yet)"
    after = profile_record(results) if results.profile else "(not profiled in this run: add `--profile`)"
    return (
        "## Profile: before and after\n\n"
        "py-spy at 200 Hz on the gateway process (default flags) under C = 64 load, each era "
        "(`python -m bench --profile`). *Inclusive*: on the stack; *self*: on top.\n\n"
        "### Before\n\n" + before + "\n\n### After (this run)\n\n" + after
    )


def profile_record(results: TargetResults) -> str:
    """This run's profile, headed by what was profiled when (kept in ``bench/profile-before.md``
    by ``--save-before``; the page's "after")."""
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    head = f"Gateway {gateway_revision()}, profiled {when} (load average {load_average()} then)."
    return head + "\n\n" + "\n\n".join(f"```\n{text}\n```" for text in results.profile.values()) + "\n"


def page(results: TargetResults, command: str) -> str:
    plan = results.plan
    peers = ", ".join(f"{k} {v}" for k, v in procs.peer_versions().items()) or "none installed"
    if not plan.peers:
        peers = "left out of this run"
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    before, after = results.load_average
    facts = [
        ["when", when],
        ["machine", machine() + f"; load average {before} before the run, {after} after"],
        ["software", versions() + f", node {procs.node_version()}"],
        ["HTTP engine", procs.engine_version(procs.ENGINE)],
        ["gateway", gateway_revision()],
        ["peers", peers],
        ["plan", f"{plan.name}: medians of {plan.reps} run(s); {', '.join(results.groups)}; {results.seconds:.0f} s"],
    ]
    sections = [
        "# Benchmarks",
        "Generated by `" + command + "`. Do not edit by hand: run it again. The analysis at "
        "the end is kept in `bench/analysis.md`; the older, wider matrix (pool scaling, "
        "`--workers`, large replies, cold start) is `python -m bench --suite full`.",
        table(["", ""], facts),
        *filter(None, [busy_warning(results)]),
        "Every server runs as its own process on 127.0.0.1 in front of the same stdlib echo "
        "server (`bench/servers/echo.py`); the load generator is one asyncio process on uvloop "
        "with raw HTTP/1.1 keep-alive connections (`bench/load.py`). Ratios are within this "
        "run. Targets are measured with the gateway's default flags; the bearer-auth rows add "
        "`--auth-token`, and are compared with the peers' default-flag numbers.",
        "## Targets (issue #14)\n\n" + targets_table(verdicts(results)),
    ]
    if results.servers:
        sections.append(
            f"## Load: `tools/call` on the echo server, C = {plan.concurrency}\n\n"
            f"Closed loop: {plan.concurrency} clients, each with one keep-alive connection, up to "
            f"{plan.calls} calls each, the next sent when the last is answered (a run stops sending "
            f"after {plan.max_seconds:g} s: *capped*). Legacy clients open a session first (not "
            "timed). The raw ceiling is a no-op asyncio HTTP server answering the same JSON: the "
            "load generator's own limit. `CPU µs/call` is the server's own process (children not "
            "included) between the first call and the last answer, per answered call. RSS is "
            "read after the last run. " + BARE_BRIDGE + "\n\n"
            "Every answer is checked: each client numbers its requests from 1, as a real client "
            "does, and each call echoes a message naming the client and the call "
            "(`client 12 call 34`); an answer is right only when it carries that client's "
            "message for that call. `answers right` counts them; a server with any answer wrong "
            "(another client's, another call's, none) is shown but not compared on speed "
            f"(`{WRONG_ANSWERS}`), and is no best peer.\n\n" + load_table(results)
        )
        sections.append("### Answers checked\n\n" + answers_section(results))
    if results.c1:
        title = "the gateway and the peers" if any(name not in BRIDGES for name in results.c1_peers) else "the gateway"
        sections.append(
            f"## C = 1: {title} against the stdio floor\n\n"
            "The floor drives the same echo server over one pipe with no HTTP "
            f"(`bench/floor.py`); {plan.c1_calls} calls per run, one client. Each repetition "
            "measures the floor, the gateway's two eras and then every installed peer's (started "
            "as in the load group, warmed at C = 1), each server with the others paused; a run "
            f"stops sending after {C1_MAX_SECONDS:g} s (*capped*). `over floor` is a row's p50 "
            "minus the floor's: the overhead the gateway must keep at or under half the best "
            "correct peer's. A peer with any wrong answer or error is shown but not compared "
            "(`not compared`), and is no best peer. " + BARE_BRIDGE + "\n\n" + c1_table(results)
        )
    if results.memory is not None:
        m = results.memory
        sections.append(
            "## Memory\n\n"
            f"Gateway process RSS: {m.idle_mb:.1f} MB idle, {m.steady_mb:.1f} MB after {m.requests:,} "
            f"requests (half modern, half legacy, C = {plan.memory_concurrency}), {m.open_mb:.1f} MB with "
            f"{m.streams_open:,} SSE streams held open at once (a `hold` call each; spread over "
            "principals named in a header the gateway trusts from 127.0.0.1, since it allows 256 "
            "requests in flight per principal)."
        )
    sections.append(profile_section(results))
    if ANALYSIS.exists():
        sections.append(ANALYSIS.read_text().strip())
    return "\n\n".join(sections) + "\n"
