"""What the gateway's cgroup lets it use: memory and CPU limits, cgroup v1 and v2.

The child cap (``gateway.stdio.budget``) is sized to what the gateway may use; in a container
that is its cgroup's limits, not the machine's. The two hierarchies say them differently:

- v2 (unified): memory in ``memory.max`` (bytes, or ``max``); CPU in ``cpu.max``
  (``QUOTA PERIOD`` in µs, or ``max PERIOD``);
- v1: memory in ``memory/memory.limit_in_bytes`` (bytes; no limit is a huge number,
  ``V1_UNLIMITED_FROM``); CPU in ``cpu/cpu.cfs_quota_us`` (``-1``: none) over
  ``cpu/cpu.cfs_period_us``.

A limit on any ancestor of the process's cgroup binds it too, and a container usually sees its
own cgroup as the root of the mount (a cgroup namespace, or a v1 bind mount) while
``/proc/self/cgroup`` may still name its path on the host. So every directory from the mount's
root down the path ``/proc/self/cgroup`` names is looked at (those that exist), and the smallest
limit wins. A CPU limit is a number of CPUs (quota / period: ``--cpus 1.5`` is 1.5).

The reading is pure: ``candidate_files`` (which files, from ``/proc/self/cgroup``'s text) and
``limits_from`` (the limits, from the files' contents); ``read_limits`` is the I/O edge, and
finds nothing where there is no ``/sys/fs/cgroup`` (not Linux).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP: Final = Path("/proc/self/cgroup")
V1_UNLIMITED_FROM: Final = 1 << 60
"""cgroup v1 says "no memory limit" with the largest page count in bytes (9223372036854771712
with 4 KiB pages, a little less with larger ones): a limit of 1 EiB or more is no limit."""

MEMORY_MAX: Final = "memory.max"
CPU_MAX: Final = "cpu.max"
MEMORY_LIMIT_V1: Final = "memory.limit_in_bytes"
CPU_QUOTA_V1: Final = "cpu.cfs_quota_us"
CPU_PERIOD_V1: Final = "cpu.cfs_period_us"


@dataclass(frozen=True, slots=True)
class CgroupLimits:
    """The smallest limits found; None: none found (unlimited, or no cgroup)."""

    memory_bytes: int | None = None
    cpus: float | None = None


def _ancestors(path: str) -> list[PurePosixPath]:
    """``/a/b`` → ``.``, ``a``, ``a/b``: the mount's root and each directory down to the path."""
    parts = [part for part in path.split("/") if part and part not in (".", "..")]
    return [PurePosixPath(*parts[:depth]) if depth else PurePosixPath(".") for depth in range(len(parts) + 1)]


def candidate_files(proc_self_cgroup: str) -> list[str]:
    """The files under ``/sys/fs/cgroup`` that may hold a limit of this process, from the text
    of ``/proc/self/cgroup`` (``ID:CONTROLLERS:PATH`` lines; v2's has no controllers). The
    roots of both hierarchies are always candidates (a container's own cgroup)."""
    v2_paths = ["/"]
    memory: dict[str, list[str]] = {"memory": ["/"]}  # v1 mount directory → cgroup paths
    cpu: dict[str, list[str]] = {"cpu": ["/"]}
    for line in proc_self_cgroup.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        if not controllers:
            v2_paths.append(path)
            continue
        names = controllers.split(",")
        if "memory" in names:
            memory.setdefault(controllers, []).append(path)
            memory["memory"].append(path)
        if "cpu" in names:  # mounted as "cpu,cpuacct", with "cpu" a link to it, or as "cpu"
            cpu.setdefault(controllers, []).append(path)
            cpu["cpu"].append(path)
    files: list[str] = []

    def add(mount: str, paths: list[str], names: tuple[str, ...]) -> None:
        for path in paths:
            for directory in _ancestors(path):
                for name in names:
                    file = str(PurePosixPath(mount, directory, name)) if mount else str(directory / name)
                    if file not in files:
                        files.append(file)

    add("", v2_paths, (MEMORY_MAX, CPU_MAX))
    for mount, paths in memory.items():
        add(mount, paths, (MEMORY_LIMIT_V1,))
    for mount, paths in cpu.items():
        add(mount, paths, (CPU_QUOTA_V1, CPU_PERIOD_V1))
    return files


def _integer(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def limits_from(contents: Mapping[str, str]) -> CgroupLimits:
    """The limits the files say (``contents``: path under ``/sys/fs/cgroup`` → text; missing
    files are simply absent). Unreadable values are ignored, never an error."""
    memory: list[int] = []
    cpus: list[float] = []
    for path, text in contents.items():
        directory, _, name = path.rpartition("/")
        if name == MEMORY_MAX:
            value = _integer(text)  # "max": none
            if value is not None and value > 0:
                memory.append(value)
        elif name == MEMORY_LIMIT_V1:
            value = _integer(text)
            if value is not None and 0 < value < V1_UNLIMITED_FROM:
                memory.append(value)
        elif name == CPU_MAX:
            quota, _, period = text.strip().partition(" ")
            quota_us, period_us = _integer(quota), _integer(period or "100000")  # "max 100000": none
            if quota_us is not None and quota_us > 0 and period_us:
                cpus.append(quota_us / period_us)
        elif name == CPU_QUOTA_V1:
            quota_us = _integer(text)  # -1: none
            period_us = _integer(contents.get(f"{directory}/{CPU_PERIOD_V1}" if directory else CPU_PERIOD_V1, ""))
            if quota_us is not None and quota_us > 0 and period_us:
                cpus.append(quota_us / period_us)
    return CgroupLimits(min(memory, default=None), min(cpus, default=None))


def read_limits(root: Path = CGROUP_ROOT, proc_self_cgroup: Path = PROC_SELF_CGROUP) -> CgroupLimits:
    """This process's cgroup limits (the I/O edge of ``candidate_files`` and ``limits_from``)."""
    try:
        membership = proc_self_cgroup.read_text()
    except OSError:
        membership = ""
    contents: dict[str, str] = {}
    for file in candidate_files(membership):
        try:
            contents[file] = (root / file).read_text()
        except OSError:  # not this hierarchy, not this level, or no cgroup at all
            continue
    return limits_from(contents)
