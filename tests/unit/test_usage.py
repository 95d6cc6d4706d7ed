"""Children's memory and CPU from ``/proc`` (``gateway.stdio.usage``): the stat line parsed, a
process group summed, a fake ``/proc`` read, and a child's CPU reading that never falls."""

from __future__ import annotations

from pathlib import Path

from gateway.stdio.usage import (
    GroupUsage,
    ProcStat,
    group_usage,
    highest_cpu_us,
    parse_stat,
    read_groups,
    read_process,
)


def stat_line(pid: int, command: str, group: int, ticks: tuple[int, int, int, int], rss_pages: int) -> str:
    """A ``/proc/PID/stat`` line as Linux writes it (52 fields)."""
    fields = ["S", "1", str(group), str(group), "0", "-1", "4194560", "100", "0", "0", "0"]  # 3 … 13
    fields += [str(t) for t in ticks]  # 14 utime, 15 stime, 16 cutime, 17 cstime
    fields += ["20", "0", "1", "0", "12345", "123456789", str(rss_pages)]  # 18 … 24
    fields += ["0"] * 28  # 25 … 52
    return f"{pid} ({command}) {' '.join(fields)}\n"


def test_a_stat_line_is_read_past_a_command_with_spaces_and_parentheses() -> None:
    line = stat_line(42, "node (server) x", 40, (10, 5, 3, 2), 2500)
    assert parse_stat(line) == ProcStat(pid=42, group=40, cpu_ticks=20, rss_pages=2500)


def test_what_is_not_a_stat_line_is_none() -> None:
    assert parse_stat("") is None
    assert parse_stat("42 (cut short) S 1 40") is None
    assert parse_stat(stat_line(42, "x", 40, (1, 1, 1, 1), 1).replace(" 123456789 1 ", " 123456789 lots ")) is None


def test_a_group_is_summed_and_other_groups_are_left_out() -> None:
    stats = [
        ProcStat(100, 100, 300, 1000),  # the child (npx)
        ProcStat(101, 100, 150, 3000),  # its node, in its group
        ProcStat(200, 200, 10, 10),  # another child
        ProcStat(1, 1, 99999, 99999),  # not a child
    ]
    usage = group_usage(stats, {100, 200, 300}, page_size=4096, ticks_per_second=100)
    assert usage == {
        100: GroupUsage(rss_bytes=4000 * 4096, cpu_seconds=4.5, processes=2),
        200: GroupUsage(rss_bytes=10 * 4096, cpu_seconds=0.1, processes=1),
    }


def test_a_fake_proc_is_read_in_one_pass(tmp_path: Path) -> None:
    for pid, group in ((100, 100), (101, 100), (7, 7)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(stat_line(pid, "srv", group, (100, 0, 0, 0), 10))
    (tmp_path / "self").mkdir()  # not a pid
    (tmp_path / "102").mkdir()  # gone since the listing: no stat
    usage = read_groups({100}, tmp_path)
    assert list(usage) == [100]
    assert usage[100].processes == 2
    assert read_groups(set(), tmp_path) == {}
    assert read_groups({100}, tmp_path / "no-proc") == {}
    assert read_process(102, tmp_path) is None
    assert read_process(7, tmp_path) is not None


def test_a_childs_cpu_reading_keeps_its_highest() -> None:
    kept = highest_cpu_us(0, 1.5)
    kept = highest_cpu_us(kept, 0.5)  # a member of its group was reaped elsewhere: the group's sum fell
    kept = highest_cpu_us(kept, None)  # not read (gone, or not Linux)
    assert kept == 1_500_000
    assert highest_cpu_us(kept, 2.25) == 2_250_000
