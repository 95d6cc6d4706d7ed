"""The benchmark still runs end to end, and its target table says what it measured.

* ``python -m bench --smoke`` (the older, wider matrix at toy sizes) starts every kind of
  server it measures (gateways, no-op calibration server, the floor's pipe) and writes its page.
* ``python -m bench --tiny`` (issue #14's targets at toy sizes) runs every group — load with
  and without bearer auth, C = 1 against the floor, streaming, memory — and writes the page
  (in two runs, each well inside its time limit).
* The verdicts (PASS/MISS against each target) and the tables are checked on hand-built
  results, so their arithmetic is tested without running anything.
* The answer check (``bench.load``): a server that crosses answers between clients, or
  leaves a call unanswered, is caught and counted, in process against a no-op server, and
  such a peer is not compared on speed.

None of these measure anything worth reading, and none asserts a speed.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bench import load, noop, verdicts
from bench.load import MISSING, NO_ECHO, OTHER_CALL, OTHER_CLIENT, RIGHT, Row, classify, http_load
from bench.scenarios import StreamResult
from bench.targets import (
    BRIDGE,
    CEILING,
    FLOOR,
    GATEWAY,
    GATEWAY_AUTH,
    PROTOCOL_BRIDGE,
    TINY,
    MemoryNumbers,
    Server,
    StreamNumbers,
    TargetResults,
)
from bench.targets import DEFAULT as DEFAULT_PLAN
from tests.conftest import MACHINE_WIDE

REPO = Path(__file__).resolve().parent.parent
SMOKE_DEADLINE = 50.0
"""Seconds a tiny run may take (it needs about 10-20); under pytest's 60 s backstop."""


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=SMOKE_DEADLINE,
    )


@MACHINE_WIDE  # its servers bind picked ports
def test_the_smoke_run_starts_every_server_and_writes_the_page(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    done = run_bench("--smoke", "--output", str(page))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = page.read_text()
    for heading in (
        "## Targets",
        "## Load",
        "## Pool scaling",
        "## Workers",
        "## Streaming",
        "## Large replies",
        "## Memory",
    ):
        assert heading in text
    assert "| gateway | modern |" in text
    assert "| gateway | legacy |" in text
    assert "| floor (pipe) | modern |" in text
    gateway_rows = [
        line.split("|")
        for line in text.splitlines()
        if line.startswith(("| gateway | modern |", "| gateway | legacy |"))
    ]
    assert gateway_rows
    assert all(cells[6].strip() == "0" for cells in gateway_rows), gateway_rows  # no errors
    assert "20/20 completed" in text  # every held SSE stream got its answer


def target_labels(text: str) -> dict[str, str]:
    """The targets table of a page: each row's target and its label."""
    section = text.split("## Targets (issue #14)", 1)[1].split("\n## ", 1)[0]
    cells = [line.split("|") for line in section.splitlines() if line.startswith("| ")]
    return {row[1].strip(): row[4].strip() for row in cells[1:] if len(row) == 6}


@MACHINE_WIDE  # its servers bind picked ports
def test_the_tiny_load_run_measures_both_gateways_in_both_eras(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    done = run_bench("--tiny", "--only", "load", "--output", str(page))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "## Targets (issue #14), plan tiny" in done.stdout
    text = page.read_text()
    labels = target_labels(text)
    assert len(labels) == 16, labels  # 2 gateways x 2 eras x (answers, vs peers, vs ceiling, CPU per call)
    # No peers in a tiny run: only the peer ratios are n/a; everything else was measured.
    not_measured = [name for name, label in labels.items() if label == "n/a"]
    assert not_measured == [name for name in labels if name.endswith("vs the best peer")], labels
    assert all(label in ("PASS", "MISS") for name, label in labels.items() if name not in not_measured)
    answers = {name: label for name, label in labels.items() if name.endswith("every answer right")}
    assert len(answers) == 4
    assert set(answers.values()) == {"PASS"}, answers  # every echo came back to the client that sent it
    for name in ("gateway", "gateway (bearer auth)"):  # every call answered, with and without a token
        for era in ("modern", "legacy"):
            row = next(line for line in text.splitlines() if line.startswith(f"| {name} | {era} |"))
            assert row.split("|")[6].strip() == "0", row  # errors
            assert row.split("|")[7].strip() == "20/20", row  # answers right: 4 clients x 5 calls
    assert "- ceiling (raw), modern: 20 of 20 answers right" in text
    for era in ("modern", "legacy"):  # the bare bridges rewrite ids: every echo reached its client
        assert f"- bridge (bare uvicorn), {era}: 20 of 20 answers right" in text
        assert f"- bridge (bare protocol), {era}: 20 of 20 answers right" in text
    assert "### Before" in text


@MACHINE_WIDE  # its servers bind picked ports
@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_the_layers_table_measures_every_layer_with_every_answer_right(era: str) -> None:
    # The bridges (callbacks, a task per request, uvicorn), the gateway's app on the lean
    # server and on uvicorn, each answering every call right, in a table with one row each.
    done = subprocess.run(
        [sys.executable, "-m", "bench.layers", "--era", era, "--reps", "1", "--calls", "10"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=SMOKE_DEADLINE,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line for line in done.stdout.splitlines() if line.startswith("| ")}
    for name in (
        "bare protocol bridge: callbacks only",
        "+ an asyncio task per request",
        "bare uvicorn bridge",
        "the gateway's app on a lean HTTP server",
        "the gateway on uvicorn, as shipped",
    ):
        assert re.fullmatch(rf"\| {re.escape(name)} \| [+-]\d\.\d{{3}} ms \| .* \| 0 \|", rows[name]), rows[name]


@MACHINE_WIDE  # its servers bind picked ports
def test_the_tiny_run_of_the_other_groups_delivers_every_notification_and_stream(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    done = run_bench("--tiny", "--only", "c1,stream,memory", "--output", str(page))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = page.read_text()
    labels = target_labels(text)
    assert list(labels) == [
        "C = 1, modern: p50",
        "C = 1, modern: overhead vs the best correct peer",
        "C = 1, legacy: p50",
        "C = 1, legacy: overhead vs the best correct peer",
        "streaming: 50 progress written flat out",
        "streaming: 200 progress + 20 log messages flat out",
        "memory: gateway RSS steady",
        "memory: gateway RSS, 20 streams open",
    ]
    # No peers in a tiny run: the peer comparisons are shown, n/a; everything else was measured.
    versus_peers = [name for name in labels if name.endswith("overhead vs the best correct peer")]
    assert all(labels[name] == "n/a" for name in versus_peers), labels
    assert "| no peer measured |" in text
    assert all(label in ("PASS", "MISS") for name, label in labels.items() if name not in versus_peers), labels
    assert "## C = 1: the gateway against the stdio floor" in text  # no peer rows in its table
    for era in ("modern", "legacy"):  # but the bare bridges', yardsticks, every answer right
        for kind in ("uvicorn", "protocol"):
            assert re.search(rf"\| bridge \(bare {kind}\), {era} \| [\d,]+ \| [\d.]+ \| \+?-?[\d.]+ ms \|", text), text
            assert re.search(rf"\| bridge \(bare {kind}\), {era} \|.*\| 0 \| 20/20 \|", text), text
    # Correctness, not speed: every notification, the result and every held stream arrived.
    assert labels["streaming: 50 progress written flat out"] == "PASS"
    assert labels["streaming: 200 progress + 20 log messages flat out"] == "PASS"
    assert "50/50 at" in text
    assert "20/20 log messages, result arrived" in text
    assert "20/20 completed" in text
    # Every steady-state request answered (the memory gateway trusts a principal header: the
    # requests must name one, or each is refused 401 and the RSS is read after no work).
    assert "(0 errors;" in text, text


# -- the verdicts, on hand-built results ------------------------------------------------------


def row(rps: float, *, p50_ms: float = 1.0, cpu_us: float | None = None, errors: int = 0) -> Row:
    cores = cpu_us * rps / 1e6 if cpu_us is not None else None
    return Row(rps, p50_ms, 2 * p50_ms, ok=int(rps), errors=errors, cpu=cores)


def server(name: str, modern: float | None, legacy: float | None, cpu_us: float | None = None) -> Server:
    found = Server(name, ("modern", "legacy") if legacy is not None or modern is None else ("modern",))
    if modern is not None:
        found.runs["modern"] = [row(modern, cpu_us=cpu_us)]
    if legacy is not None:
        found.runs["legacy"] = [row(legacy, cpu_us=cpu_us)]
    return found


def results(**servers: Server) -> TargetResults:
    found = TargetResults(DEFAULT_PLAN, ("load",))
    found.servers = {s.name: s for s in servers.values()}
    return found


def by_target(found: list[verdicts.Verdict]) -> dict[str, verdicts.Verdict]:
    return {v.target: v for v in found}


def test_the_gateway_passes_against_peers_only_at_three_times_the_best_one_per_era() -> None:
    measured = results(
        gateway=server(GATEWAY, 3_000, 2_999, cpu_us=150),
        auth=server(GATEWAY_AUTH, 3_100, 4_000, cpu_us=151),
        ceiling=server(CEILING, 10_000, None),
        weak=server("weak peer", 500, 100),
        strong=server("mcp-proxy (npm)", 1_000, 1_000),
    )
    found = by_target(verdicts.load_verdicts(measured))
    modern = found["C = 64, modern, default flags: vs the best peer"]
    assert modern.passed is True  # exactly 3x the strongest peer (1,000), not the weak one
    assert "mcp-proxy (npm)" in modern.measured
    assert found["C = 64, legacy, default flags: vs the best peer"].passed is False  # 2.999x
    assert found["C = 64, legacy, bearer auth: vs the best peer"].passed is True
    # 30 % of the raw ceiling (10,000): 3,000 passes, 2,999 does not
    assert found["C = 64, modern, default flags: share of the raw ceiling"].passed is True
    assert found["C = 64, legacy, default flags: share of the raw ceiling"].passed is False
    # the CPU budget: 150 us passes, 151 does not
    assert found["C = 64, modern, default flags: gateway CPU per call"].passed is True
    assert found["C = 64, modern, default flags: gateway CPU per call"].measured == "150 µs"
    assert found["C = 64, modern, bearer auth: gateway CPU per call"].passed is False


def test_a_peer_that_is_not_installed_or_not_serving_an_era_is_no_best_peer() -> None:
    missing = Server("supergateway", ("modern", "legacy"), problem="not installed (run bench/install-peers.sh)")
    partial = server("mcp-proxy (PyPI)", None, 800)
    partial.unsupported["modern"] = "HTTP 400"
    measured = results(gateway=server(GATEWAY, 2_400, 2_400), missing=missing, partial=partial)
    assert verdicts.best_peer(measured, "modern") is None
    assert verdicts.best_peer(measured, "legacy") == ("mcp-proxy (PyPI)", 800)
    found = by_target(verdicts.load_verdicts(measured))
    assert found["C = 64, modern, default flags: vs the best peer"].passed is None
    assert found["C = 64, modern, default flags: vs the best peer"].label == "n/a"
    assert found["C = 64, legacy, default flags: vs the best peer"].passed is True
    assert found["C = 64, modern, default flags: share of the raw ceiling"].passed is None  # no ceiling
    table = verdicts.load_table(measured)
    assert "| supergateway | – | not installed (run bench/install-peers.sh) |" in table
    assert "| mcp-proxy (PyPI) | modern | not supported: HTTP 400 |" in table


def test_c1_passes_within_three_tenths_of_a_millisecond_of_the_floor() -> None:
    measured = TargetResults(DEFAULT_PLAN, ("c1",))
    measured.c1 = {FLOOR: row(10_000, p50_ms=0.1), "modern": row(2_500, p50_ms=0.4), "legacy": row(2_000, p50_ms=0.41)}
    found = by_target(verdicts.verdicts(measured))
    assert found["C = 1, modern: p50"].passed is True
    assert found["C = 1, legacy: p50"].passed is False
    assert "+0.310 ms" in found["C = 1, legacy: p50"].measured


def c1_peer(name: str, modern_p50: float | None, legacy_p50: float | None, **faults: int) -> Server:
    """A peer's C = 1 rows (1,000 calls each; ``wrong``/``errors``: that many in both eras)."""
    found = Server(name, ("modern", "legacy"))
    wrong = {OTHER_CLIENT: faults["wrong"]} if faults.get("wrong") else {}
    for era, p50 in (("modern", modern_p50), ("legacy", legacy_p50)):
        if p50 is not None:
            ok = 1_000 - faults.get("wrong", 0)
            found.runs[era] = [Row(900, p50, 2 * p50, ok=ok, errors=faults.get("errors", 0), wrong=wrong)]
    return found


def c1_results(modern: float, legacy: float, *peers: Server) -> TargetResults:
    """C = 1 with the floor at 0.1 ms p50 and the gateway's eras at ``modern`` and ``legacy``."""
    measured = TargetResults(DEFAULT_PLAN, ("c1",))
    measured.c1 = {
        FLOOR: row(10_000, p50_ms=0.1),
        "modern": row(4_000, p50_ms=modern),
        "legacy": row(4_000, p50_ms=legacy),
    }
    measured.c1_peers = {peer.name: peer for peer in peers}
    return measured


def test_c1_overhead_passes_at_half_the_best_correct_peers_and_misses_above() -> None:
    # Over the floor: the gateway 0.15 (modern) and 0.16 (legacy); the best peer 0.3, a weaker one 0.5.
    measured = c1_results(0.25, 0.26, c1_peer("weak", 0.6, 0.6), c1_peer("ContextForge", 0.4, 0.4))
    assert verdicts.c1_best_peer(measured, "modern") == ("ContextForge", pytest.approx(0.3))
    found = by_target(verdicts.verdicts(measured))
    modern = found["C = 1, modern: overhead vs the best correct peer"]
    assert modern.passed is True  # exactly half
    assert modern.measured == "+0.150 ms vs ContextForge +0.300 ms (0.50× its overhead)"
    assert modern.goal == "≤ ½ the best correct peer's"
    legacy = found["C = 1, legacy: overhead vs the best correct peer"]
    assert legacy.passed is False  # 0.16 > 0.15
    assert "(0.53× its overhead)" in legacy.measured
    assert found["C = 1, legacy: p50"].passed is True  # the floor + 0.3 ms rows stay as they were
    below = by_target(verdicts.verdicts(c1_results(0.2, 0.2, c1_peer("ContextForge", 0.4, 0.4))))
    assert below["C = 1, modern: overhead vs the best correct peer"].passed is True
    labels = [v.target for v in verdicts.verdicts(measured)]
    assert labels == [
        "C = 1, modern: p50",
        "C = 1, modern: overhead vs the best correct peer",
        "C = 1, legacy: p50",
        "C = 1, legacy: overhead vs the best correct peer",
    ]


def test_a_c1_peer_with_a_wrong_answer_or_an_error_is_never_the_best_one() -> None:
    measured = c1_results(
        0.25,
        0.25,
        c1_peer("ContextForge", 0.11, 0.11, wrong=1),
        c1_peer("supergateway", 0.12, 0.12, errors=1),
        c1_peer("mcp-proxy (npm)", 0.4, 0.4),
    )
    assert verdicts.c1_best_peer(measured, "modern") == ("mcp-proxy (npm)", pytest.approx(0.3))
    found = by_target(verdicts.verdicts(measured))["C = 1, modern: overhead vs the best correct peer"]
    assert found.passed is True  # half of mcp-proxy's 0.3, not a tenth of the faster, faulty ones'
    assert found.measured.startswith("+0.150 ms vs mcp-proxy (npm) +0.300 ms")
    assert found.measured.endswith("; not compared: ContextForge (wrong answers), supergateway (errors)")
    only_faulty = c1_results(0.25, 0.25, c1_peer("ContextForge", 0.11, 0.11, wrong=3, errors=2))
    found = by_target(verdicts.verdicts(only_faulty))["C = 1, legacy: overhead vs the best correct peer"]
    assert (found.passed, found.label) == (None, "n/a")
    assert found.measured == "no correct peer measured; not compared: ContextForge (wrong answers, errors)"


def test_c1_overhead_without_peers_is_not_measured_and_a_faulty_gateway_misses() -> None:
    alone = by_target(verdicts.verdicts(c1_results(0.25, 0.25)))
    for era in ("modern", "legacy"):
        found = alone[f"C = 1, {era}: overhead vs the best correct peer"]
        assert (found.measured, found.passed) == ("no peer measured", None)
    measured = c1_results(0.2, 0.2, c1_peer("mcp-proxy (npm)", 0.4, 0.4))
    measured.c1["modern"] = Row(4_000, 0.2, 0.4, ok=999, errors=0, wrong={OTHER_CALL: 1})
    found = by_target(verdicts.verdicts(measured))["C = 1, modern: overhead vs the best correct peer"]
    assert (found.measured, found.passed) == ("n/a: wrong answers", False)


def test_the_c1_table_has_a_row_per_peer_and_era_with_its_answers_and_overhead() -> None:
    missing = Server("supergateway", ("modern", "legacy"), problem="not installed (run bench/install-peers.sh)")
    partial = c1_peer("mcp-proxy (PyPI)", None, 0.5)
    partial.unsupported["modern"] = "HTTP 400"
    crossing = c1_peer("ContextForge", 0.35, 0.36, wrong=2)
    measured = c1_results(0.25, 0.26, missing, partial, crossing)
    lines = verdicts.c1_table(measured).splitlines()
    assert lines[0] == "| path | req/s | p50 ms | over floor | p99 ms | errors | answers right | CPU µs/call |"
    assert lines[2] == "| floor (pipe) | 10,000 | 0.100 |  | 0.200 | 0 | 10,000/10,000 | – |"
    assert lines[3] == "| gateway, modern | 4,000 | 0.250 | +0.150 ms | 0.500 | 0 | 4,000/4,000 | – |"
    assert lines[5] == "| supergateway | not installed (run bench/install-peers.sh) |  |  |  |  |  |  |"
    assert lines[6] == "| mcp-proxy (PyPI), modern | not supported: HTTP 400 |  |  |  |  |  |  |"
    assert lines[7] == "| mcp-proxy (PyPI), legacy | 900 | 0.500 | +0.400 ms | 1.000 | 0 | 1,000/1,000 | – |"
    assert lines[8] == "| ContextForge, modern | 900 | 0.350 | +0.250 ms (not compared) | 0.700 | 0 | 998/1,000 | – |"
    assert len(lines) == 10
    assert "| ContextForge, legacy |" in lines[9]
    text = verdicts.page(measured, "python -m bench")
    assert "## C = 1: the gateway and the peers against the stdio floor" in text
    assert "\n".join(lines) in text


def test_the_bare_bridge_is_a_yardstick_shown_beside_the_peers_and_never_the_best_one() -> None:
    measured = results(
        gateway=server(GATEWAY, 3_000, 3_000),
        bridge=server(BRIDGE, 9_000, 8_000),
        protocol=server(PROTOCOL_BRIDGE, 12_000, 12_000),
        peer=server("mcp-proxy (npm)", 1_000, 1_000),
    )
    assert verdicts.best_peer(measured, "modern") == ("mcp-proxy (npm)", 1_000)
    found = by_target(verdicts.load_verdicts(measured))
    assert found["C = 64, modern, default flags: vs the best peer"].passed is True  # 3x the peer, not 1/3 the bridge
    table = verdicts.load_table(measured)
    assert "| bridge (bare uvicorn) | modern | 9,000 |" in table
    assert "| yardstick: gateway = 33.3% |" in table
    assert "| yardstick: gateway = 37.5% |" in table  # legacy: 3,000 of 8,000
    assert "| bridge (bare protocol) | modern | 12,000 |" in table
    assert "| yardstick: gateway = 25.0% |" in table
    # At C = 1: faster than every peer, or faulty, it is neither the best peer nor "not compared".
    fast = c1_results(
        0.25, 0.26, c1_peer(BRIDGE, 0.15, 0.16), c1_peer(PROTOCOL_BRIDGE, 0.12, 0.12), c1_peer("ContextForge", 0.4, 0.4)
    )
    assert verdicts.c1_best_peer(fast, "modern") == ("ContextForge", pytest.approx(0.3))
    modern = by_target(verdicts.verdicts(fast))["C = 1, modern: overhead vs the best correct peer"]
    assert modern.measured == (
        "+0.150 ms vs ContextForge +0.300 ms (0.50× its overhead); "
        "bare bridge +0.050 ms; bare protocol bridge +0.020 ms"
    )
    faulty = c1_results(
        0.25,
        0.25,
        c1_peer(BRIDGE, 0.15, 0.15, errors=1),
        c1_peer(PROTOCOL_BRIDGE, 0.1, 0.1, wrong=3),
        c1_peer("ContextForge", 0.4, 0.4),
    )
    assert verdicts.c1_left_out(faulty, "modern") == []
    alone = c1_results(0.25, 0.25, c1_peer(BRIDGE, 0.15, 0.15), c1_peer(PROTOCOL_BRIDGE, 0.12, 0.12))
    assert verdicts.c1_best_peer(alone, "legacy") is None
    text = verdicts.page(alone, "python -m bench")
    assert "## C = 1: the gateway against the stdio floor" in text  # the bridge is no peer
    assert "| bridge (bare uvicorn), modern | 900 | 0.150 | +0.050 ms |" in text
    assert "a yardstick, never a peer" in text


@pytest.mark.parametrize(
    ("received", "final", "passed"),
    [(2_000, True, True), (1_999, True, False), (2_000, False, False)],
)
def test_streaming_passes_only_when_every_notification_and_the_result_arrive(
    received: int, final: bool, passed: bool
) -> None:
    measured = TargetResults(DEFAULT_PLAN, ("stream",))
    measured.stream = StreamNumbers(2_000, received, 40_000.0, final, 80_000.0)
    found, flood = verdicts.verdicts(measured)
    assert found.passed is passed
    assert found.label == ("PASS" if passed else "MISS")
    assert flood.passed is None  # the flood did not run


@pytest.mark.parametrize(
    ("progress", "logs", "final", "passed"),
    [(20_000, 200, True, True), (9_000, 200, True, True), (20_000, 199, True, False), (20_000, 200, False, False)],
)
def test_a_flood_may_coalesce_progress_but_must_deliver_every_log_message_and_the_result(
    progress: int, logs: int, final: bool, passed: bool
) -> None:
    measured = TargetResults(DEFAULT_PLAN, ("stream",))
    measured.flood = StreamResult(20_000, progress, 60_000.0, 1.0, 2.0, final, logs)
    _, found = verdicts.verdicts(measured)
    assert found.target == "streaming: 20,000 progress + 200 log messages flat out"
    assert found.passed is passed


def test_memory_passes_under_80_mb_steady_and_200_mb_with_every_stream_completing() -> None:
    measured = TargetResults(DEFAULT_PLAN, ("memory",))
    measured.memory = MemoryNumbers(40.0, 80.0, 5_000, 0, 1_000, 1_000, 1_000, 200.0)
    assert [v.passed for v in verdicts.verdicts(measured)] == [True, True]
    measured.memory = MemoryNumbers(40.0, 79.0, 5_000, 1, 1_000, 1_000, 999, 120.0)
    assert [v.passed for v in verdicts.verdicts(measured)] == [False, False]  # an error; a stream lost


def test_the_targets_table_counts_pass_and_miss_and_keeps_cells_in_their_columns() -> None:
    found = [
        verdicts.Verdict("a", "x | y", "≥ 3×", True),
        verdicts.Verdict("b", "–", "≤ 1", False),
        verdicts.Verdict("c", "–", "≤ 1", None),
    ]
    text = verdicts.targets_table(found)
    assert "| a | x / y | ≥ 3× | PASS |" in text
    assert "| c | – | ≤ 1 | n/a |" in text
    assert text.endswith("1 PASS, 1 MISS of 3 rows.")


def test_a_run_of_some_groups_only_has_only_their_rows() -> None:
    measured = TargetResults(TINY, ("stream", "memory"))
    assert [v.target.split(":")[0] for v in verdicts.verdicts(measured)] == ["streaming"] * 2 + ["memory"] * 2
    assert all(v.passed is None for v in verdicts.verdicts(measured))  # nothing measured: n/a, not MISS


def test_a_run_on_a_busy_machine_says_so() -> None:
    measured = TargetResults(TINY, ())
    measured.load_average = ("0.10", "2.50")  # the run's own load does not count
    assert verdicts.busy_warning(measured) is None
    measured.load_average = ("10000.00", "10000.00")  # more than any machine has cores
    warning = verdicts.busy_warning(measured)
    assert warning is not None
    assert "load average 10000 on" in warning


def test_the_engine_flag_picks_the_server_module_and_refuses_an_unknown_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import __main__ as cli
    from bench import procs

    assert cli.parse(["--engine", "uvicorn,granian", "--tiny"]).engines == ("uvicorn", "granian")
    with pytest.raises(SystemExit):
        cli.parse(["--engine", "hypercorn"])
    assert "--engine takes uvicorn, granian" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # one page is one engine's
        cli.parse(["--engine", "uvicorn,granian", "--markdown"])
    monkeypatch.setattr(procs, "ENGINE", "granian")
    assert procs.gateway("g", tmp_path).argv[1:3] == ["-m", "bench.granian_gateway"]
    with pytest.raises(SystemExit, match="--workers"):
        procs.gateway("g", tmp_path, "--workers", "2")
    monkeypatch.setattr(procs, "ENGINE", "uvicorn")
    assert procs.gateway("g", tmp_path).argv[1:3] == ["-m", "gateway"]
    assert procs.engine_version("uvicorn").startswith("uvicorn 0.")


# -- the answer check ------------------------------------------------------------------------


ANSWER = b'{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"client %d call %d"}]}}'


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (ANSWER % (3, 7, 3), RIGHT),
        (b'{"id":3,"result":{"content":[{"type":"text", "text": "client 7 call 3"}]}}', RIGHT),  # spaced JSON
        (ANSWER % (3, 8, 3), OTHER_CLIENT),  # same id, another client's echo: a crossed answer
        (ANSWER % (2, 7, 2), OTHER_CALL),
        (ANSWER % (3, 7, 3) + b"\n" + ANSWER % (3, 8, 3), OTHER_CLIENT),  # two echoes in one body
        (b'{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"hello"}]}}', NO_ECHO),
        (b"accepted (no response yet)", NO_ECHO),
        (b"", NO_ECHO),
    ],
)
def test_the_checker_tells_the_right_echo_from_a_crossed_or_missing_one(body: bytes, kind: str) -> None:
    assert classify(body, 7, 3) == kind
    assert load.is_right(body, 7, 3) == (body == ANSWER % (3, 7, 3))  # the fast check: compact JSON only


@pytest.fixture
def crossing_server(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[bytes], bytes | None]], object]:
    """The raw no-op server, in process, with its answers rewritten by a function (None: no
    answer at all, as when a bridge sends the answer to another connection)."""

    def start(rewrite: Callable[[bytes], bytes | None]) -> object:
        plain = noop.answer

        def answer(body: bytes) -> tuple[int, bytes, bytes]:
            status, extra, payload = plain(body)
            if b'"tools/call"' not in body:
                return status, extra, payload
            changed = rewrite(payload)
            if changed is None:
                raise _Silent
            return status, extra, changed

        monkeypatch.setattr(noop, "answer", answer)
        monkeypatch.setattr(noop.RawProtocol, "data_received", _tolerant(noop.RawProtocol.data_received))
        return answer

    return start


class _Silent(Exception):
    """Raised by a rewritten answer to send nothing back."""


def _tolerant(receive: Callable[[noop.RawProtocol, bytes], None]) -> Callable[[noop.RawProtocol, bytes], None]:
    def data_received(self: noop.RawProtocol, data: bytes) -> None:
        try:
            receive(self, data)
        except _Silent:
            self.buffer = b""

    return data_received


async def load_against_noop(era: str, concurrency: int, calls: int, max_seconds: float = 5.0) -> load.LoadResult:
    server = await asyncio.get_running_loop().create_server(noop.RawProtocol, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        return await http_load(port, era=era, concurrency=concurrency, calls=calls, max_seconds=max_seconds)


def test_a_plain_echo_gets_every_answer_right_in_both_eras() -> None:
    for era in ("modern", "legacy"):
        result = asyncio.run(load_against_noop(era, 4, 5))
        assert (result.ok, result.wrong, result.errors) == (20, {}, 0), era
        assert Row.of(result).answers_line() == "20 of 20 answers right"


def test_an_answer_handed_to_the_wrong_client_is_caught_and_counted(
    crossing_server: Callable[[Callable[[bytes], bytes | None]], object],
) -> None:
    # Like a byte pipe that matches answers by id on one shared child: every client gets
    # client 0's answer to the call with its id.
    crossing_server(lambda payload: re.sub(rb"client \d+ call", b"client 0 call", payload))
    result = asyncio.run(load_against_noop("modern", 4, 5))
    assert result.ok == 5  # client 0's own
    assert result.wrong == {OTHER_CLIENT: 15}
    assert result.errors == 0
    assert result.rps > 0  # answers are still counted for speed, just not compared
    assert result.first_wrong is not None
    assert '"text":"client 0 call' in result.first_wrong
    row = Row.of(result)
    assert row.answers_line() == "15 of 20 answers went to the wrong client (another client's: 15; right: 5)"


def test_an_answer_that_never_comes_is_counted_missing_without_hanging_the_run(
    crossing_server: Callable[[Callable[[bytes], bytes | None]], object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(load, "ANSWER_GRACE", 0.2)
    crossing_server(lambda payload: None if b"client 1 call 3" in payload else payload)
    result = asyncio.run(load_against_noop("legacy", 2, 5, max_seconds=0.5))
    assert result.ok == 5 + 2  # client 0's five, client 1's first two
    assert result.wrong == {MISSING: 1}
    assert result.first_wrong == "client 1 call 3: no answer"
    assert "missing: 1" in Row.of(result).answers_line()


def test_a_peer_with_wrong_answers_is_shown_with_its_count_but_not_compared() -> None:
    crossing = server("ContextForge", 9_000, 9_000)
    for era in ("modern", "legacy"):
        crossing.runs[era] = [Row(9_000, 1.0, 2.0, ok=52, errors=0, wrong={OTHER_CLIENT: 2_892})]
    measured = results(
        gateway=server(GATEWAY, 3_000, 3_000),
        auth=server(GATEWAY_AUTH, 3_000, 3_000),
        crossing=crossing,
        right=server("mcp-proxy (npm)", 1_000, 1_000),
    )
    assert verdicts.best_peer(measured, "modern") == ("mcp-proxy (npm)", 1_000)  # not the faster, wrong one
    found = by_target(verdicts.load_verdicts(measured))
    versus = found["C = 64, modern, default flags: vs the best peer"]
    assert versus.passed is True
    assert "not compared, wrong answers: ContextForge" in versus.measured
    assert found["C = 64, modern, default flags: every answer right"].passed is True
    table = verdicts.load_table(measured)
    contextforge = next(line for line in table.splitlines() if line.startswith("| ContextForge | modern |"))
    assert "| 52/2,944 |" in contextforge
    assert contextforge.rstrip(" |").endswith("n/a: wrong answers")
    section = verdicts.answers_section(measured)
    assert "- ContextForge, modern: 2,892 of 2,944 answers went to the wrong client" in section
    assert "- gateway, modern: 3,000 of 3,000 answers right" in section


def test_the_gateway_with_a_wrong_answer_misses_and_is_not_compared() -> None:
    gateway = server(GATEWAY, 3_000, 3_000)
    gateway.runs["modern"] = [Row(3_000, 1.0, 2.0, ok=2_999, errors=0, wrong={OTHER_CALL: 1})]
    measured = results(gateway=gateway, right=server("mcp-proxy (npm)", 500, 500))
    found = by_target(verdicts.load_verdicts(measured))
    assert found["C = 64, modern, default flags: every answer right"].passed is False
    assert "1 of 3,000 answers wrong" in found["C = 64, modern, default flags: every answer right"].measured
    assert found["C = 64, modern, default flags: vs the best peer"].passed is False
    assert found["C = 64, modern, default flags: vs the best peer"].measured == verdicts.WRONG_ANSWERS
    assert found["C = 64, legacy, default flags: vs the best peer"].passed is True


def test_a_legacy_server_that_assigns_no_session_is_measured_without_one(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = noop.answer

    def sessionless(body: bytes) -> tuple[int, bytes, bytes]:
        status, _, payload = plain(body)
        return status, b"", payload  # initialize answered without mcp-session-id

    monkeypatch.setattr(noop, "answer", sessionless)
    result = asyncio.run(load_against_noop("legacy", 2, 3))
    assert (result.ok, result.wrong, result.errors) == (6, {}, 0), result.first_error


@MACHINE_WIDE  # its servers bind picked ports
def test_the_paired_ab_runs_two_checkouts_in_turn_and_reports_ratios_to_the_first() -> None:
    flags = ["--concurrency", "4", "--calls", "5", "--rounds", "2", "--era", "legacy"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.ab", "--checkout", str(REPO), "--checkout", str(REPO), *flags],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=SMOKE_DEADLINE,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith(f"| {REPO} |")]
    assert len(rows) == 2, done.stdout
    assert rows[0].split("|")[5].strip() == ""  # the first is the reference
    assert float(rows[1].split("|")[5]) > 0  # a ratio to it
    assert "medians of 2 rounds" in done.stdout


def test_the_paired_ab_refuses_fewer_than_two_checkouts() -> None:
    argv = [sys.executable, "-m", "bench.ab", "--checkout", str(REPO)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "at least two --checkout" in done.stderr


@MACHINE_WIDE  # its gateways bind picked ports
@pytest.mark.parametrize(
    ("scenario", "gateway_args"),
    [
        ("hangups", ()),
        ("deaf", ()),
        ("dialogs", ()),
        ("servers", ()),
        ("keyed", ()),
        ("keyed", ("--workers", "2")),  # found a supervisor ended by a late signal
        ("domains", ()),
        ("rolling", ()),  # two replicas, one drained and started again
    ],
)
def test_a_short_soak_runs_every_kind_of_client_and_finds_no_problem(
    scenario: str, gateway_args: tuple[str, ...]
) -> None:
    # Two seconds of each scenario's clients against a real gateway: every client kind ran
    # (its count is in the report), and no answer crossed, went missing or came twice.
    more = [f"--gateway-arg={arg}" for arg in gateway_args]
    done = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--seconds", "2", "--scenario", scenario, *more],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=SMOKE_DEADLINE,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.startswith(f"## {scenario}: no problem"), done.stdout[-3000:]
    counted = [line for line in done.stdout.splitlines() if line.startswith("    ")]
    assert counted, done.stdout
    if scenario == "rolling":  # a replica was drained and started again while its clients ran
        assert "replica rolled: drained, exited, started again" in done.stdout, done.stdout
