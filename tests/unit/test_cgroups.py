"""The child cap's cgroup reading (``gateway.stdio.cgroups``): v1 and v2 memory limits and CPU
quotas, unlimited values, limits on an ancestor, and the cap they give (``budget.children_for``).

Each fixture is what a container sees: ``/proc/self/cgroup``'s text and the files under
``/sys/fs/cgroup``, as ``docker run --memory 512m --cpus 1`` (and friends) leave them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.stdio.budget import CHILDREN_PER_CPU, MIN_CHILDREN, children_for, machine_children
from gateway.stdio.cgroups import CgroupLimits, candidate_files, limits_from, read_limits

MIB = 1024 * 1024
V1_UNLIMITED = "9223372036854771712\n"  # what cgroup v1 says for "no limit" (4 KiB pages)

V2_PROC = "0::/\n"
V1_PROC = """12:pids:/docker/3f2a
11:cpu,cpuacct:/docker/3f2a
9:memory:/docker/3f2a
1:name=systemd:/docker/3f2a
0::/system.slice/containerd.service
"""

FIXTURES: dict[str, tuple[str, dict[str, str], CgroupLimits]] = {
    "v2, --memory 512m --cpus 1": (
        V2_PROC,
        {"memory.max": "536870912\n", "cpu.max": "100000 100000\n"},
        CgroupLimits(512 * MIB, 1.0),
    ),
    "v2, --cpus 1.5, no memory limit": (
        V2_PROC,
        {"memory.max": "max\n", "cpu.max": "150000 100000\n"},
        CgroupLimits(None, 1.5),
    ),
    "v2, unlimited": (V2_PROC, {"memory.max": "max\n", "cpu.max": "max 100000\n"}, CgroupLimits()),
    "v1, --memory 512m --cpus 1 (the container's cgroup at the mount's root)": (
        V1_PROC,
        {
            "memory/memory.limit_in_bytes": "536870912\n",
            "cpu/cpu.cfs_quota_us": "100000\n",
            "cpu/cpu.cfs_period_us": "100000\n",
        },
        CgroupLimits(512 * MIB, 1.0),
    ),
    "v1, no cgroup namespace: the path from /proc/self/cgroup under the mount": (
        V1_PROC,
        {
            "memory/memory.limit_in_bytes": V1_UNLIMITED,
            "memory/docker/3f2a/memory.limit_in_bytes": "268435456\n",
            "cpu,cpuacct/docker/3f2a/cpu.cfs_quota_us": "50000\n",
            "cpu,cpuacct/docker/3f2a/cpu.cfs_period_us": "100000\n",
        },
        CgroupLimits(256 * MIB, 0.5),
    ),
    "v1, unlimited": (
        V1_PROC,
        {
            "memory/memory.limit_in_bytes": V1_UNLIMITED,
            "cpu/cpu.cfs_quota_us": "-1\n",
            "cpu/cpu.cfs_period_us": "100000\n",
        },
        CgroupLimits(),
    ),
    "v1, unlimited with 64 KiB pages": (
        V1_PROC,
        {"memory/memory.limit_in_bytes": "9223372036854710272\n"},
        CgroupLimits(),
    ),
    "v2 nested: a parent's limit binds its child cgroup": (
        "0::/kubepods/pod1/ctr\n",
        {
            "kubepods/memory.max": "1073741824\n",
            "kubepods/pod1/memory.max": "max\n",
            "kubepods/pod1/ctr/memory.max": "max\n",
            "kubepods/pod1/ctr/cpu.max": "200000 100000\n",
        },
        CgroupLimits(1024 * MIB, 2.0),
    ),
    "no cgroup at all (not Linux)": ("", {}, CgroupLimits()),
    "garbage is ignored": (V2_PROC, {"memory.max": "lots\n", "cpu.max": "\n"}, CgroupLimits()),
}


@pytest.mark.parametrize("name", FIXTURES)
def test_cgroup_limits_are_read_from_v1_and_v2_files(name: str) -> None:
    proc, files, expected = FIXTURES[name]
    assert set(files) <= set(candidate_files(proc)), "every fixture file is a candidate"
    assert limits_from({path: text for path, text in files.items() if path in candidate_files(proc)}) == expected


@pytest.mark.parametrize("name", FIXTURES)
def test_read_limits_finds_the_same_in_a_cgroup_tree(name: str, tmp_path: Path) -> None:
    proc, files, expected = FIXTURES[name]
    (tmp_path / "self-cgroup").write_text(proc)
    root = tmp_path / "cgroup"
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    assert read_limits(root, tmp_path / "self-cgroup") == expected


def test_nothing_to_read_is_no_limit(tmp_path: Path) -> None:
    assert read_limits(tmp_path / "absent", tmp_path / "absent-too") == CgroupLimits()


def test_the_documented_cap_under_512_mib_and_one_cpu_is_8_on_either_hierarchy() -> None:
    for name in (
        "v2, --memory 512m --cpus 1",
        "v1, --memory 512m --cpus 1 (the container's cgroup at the mount's root)",
    ):
        _, files, _ = FIXTURES[name]
        assert machine_children(limits_from(files)) == 8


def test_the_cap_is_the_smaller_of_cpu_and_memory_and_never_below_the_minimum() -> None:
    assert children_for(2, 4096 * MIB) == 2 * CHILDREN_PER_CPU
    assert children_for(8, 1024 * MIB) == 16
    assert children_for(1.5, None) == 24  # a fractional quota counts
    assert children_for(0.25, 128 * MIB) == MIN_CHILDREN
