"""What children cost the machine: resident memory and CPU time, read from ``/proc`` (Linux).

A child runs in its own process group, led by its pid (``gateway.stdio.process``), and what it
starts stays in that group unless it leaves with ``setsid`` (``npx`` → ``node``, a shell's
commands). So a child's usage is its group's: one pass over ``/proc/*/stat`` finds every
process whose group is a child's, and adds up

- resident memory: ``rss`` (field 24, in pages: the count ``statm``'s second field gives) ×
  the page size;
- CPU time: ``utime + stime + cutime + cstime`` (fields 14–17, in clock ticks), each process's
  own and that of the children it has waited for.

A group's CPU time can fall (a member that exits is reaped outside the group: by the gateway,
its subreaper), so a child keeps the highest it was read at (``highest_cpu_us``); its
pool keeps that when the child exits (``gateway.stdio.tally``), so the counter never falls.
A child is read at every scrape and once more when its stdout closes (its own process only,
``read_process``); what it spent after its last reading is not counted.

``parse_stat``, ``group_usage`` and ``highest_cpu_us`` are pure; ``read_groups`` and ``read_process`` are the I/O
edge, and read nothing where there is no ``/proc`` (not Linux): the metrics are then absent.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

PROC: Final = Path("/proc")
READABLE: Final = (PROC / "self" / "stat").is_file()
"""Whether this system has ``/proc`` to read (Linux): else children's usage is not reported."""


def _sysconf(name: str, default: int) -> int:
    try:
        return os.sysconf(name)
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return default


PAGE_SIZE: Final = _sysconf("SC_PAGE_SIZE", 4096)
TICKS_PER_SECOND: Final = _sysconf("SC_CLK_TCK", 100)


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of one ``/proc/PID/stat`` the gateway reads."""

    pid: int
    group: int  # pgrp: the process group (a child's pid, for the processes of its group)
    cpu_ticks: int  # utime + stime + cutime + cstime
    rss_pages: int


@dataclass(slots=True)
class GroupUsage:
    """One child's process group, summed."""

    rss_bytes: int = 0
    cpu_seconds: float = 0.0
    processes: int = 0


def parse_stat(text: str) -> ProcStat | None:
    """One ``/proc/PID/stat`` line; None if it is not one. The command (field 2) is in
    parentheses and may hold spaces and parentheses itself, so the fields after it are
    counted from its last ``)``."""
    head, closing, rest = text.rpartition(")")
    pid, _, _ = head.partition(" (")
    fields = rest.split()
    if not closing or len(fields) < 22:  # fields 3 … 24 at least
        return None
    try:
        # fields[0] is field 3 (state): field n is fields[n - 3]
        cpu = sum(int(fields[n - 3]) for n in (14, 15, 16, 17))
        return ProcStat(int(pid), int(fields[5 - 3]), cpu, int(fields[24 - 3]))
    except ValueError:
        return None


def group_usage(
    stats: Iterable[ProcStat],
    leaders: Collection[int],
    *,
    page_size: int = PAGE_SIZE,
    ticks_per_second: int = TICKS_PER_SECOND,
) -> dict[int, GroupUsage]:
    """By leader (a child's pid): its group's usage, from every process's stat. A leader with
    no process found is left out."""
    usage: dict[int, GroupUsage] = {}
    for stat in stats:
        if stat.group in leaders:
            group = usage.setdefault(stat.group, GroupUsage())
            group.rss_bytes += stat.rss_pages * page_size
            group.cpu_seconds += stat.cpu_ticks / ticks_per_second
            group.processes += 1
    return usage


def highest_cpu_us(kept: int, seconds: float | None) -> int:
    """The CPU time to keep for a child, in µs: the highest it was read at (``seconds``: a new
    reading; None: not read, gone or not Linux), so what metrics count never falls."""
    return kept if seconds is None else max(kept, round(seconds * 1_000_000))


def _read_stat(path: Path) -> ProcStat | None:
    try:
        return parse_stat(path.read_text())
    except (OSError, UnicodeDecodeError):  # gone since the listing, or not readable
        return None


def read_groups(leaders: Collection[int], proc: Path = PROC) -> dict[int, GroupUsage]:
    """The usage of each process group led by one of ``leaders`` (one pass over ``proc``)."""
    if not leaders:
        return {}
    try:
        pids = [entry.name for entry in os.scandir(proc) if entry.name.isdigit()]
    except OSError:  # no /proc: not Linux
        return {}
    stats = (_read_stat(proc / pid / "stat") for pid in pids)
    return group_usage((stat for stat in stats if stat is not None), leaders)


def read_process(pid: int, proc: Path = PROC) -> float | None:
    """One process's CPU seconds (its own and its waited-for children's); None if it is gone."""
    stat = _read_stat(proc / str(pid) / "stat")
    return None if stat is None else stat.cpu_ticks / TICKS_PER_SECOND
