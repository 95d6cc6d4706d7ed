"""A pool's tally (``gateway.stdio.tally``): the cold-start histogram counts every start, and
tallies add up, so a server's counters can outlive its pools."""

from __future__ import annotations

import math
from collections import Counter

from gateway.stdio.tally import START_BUCKETS, PoolTally, StartTimes


def test_the_start_histogram_counts_every_start_past_a_hundred() -> None:
    starts = StartTimes()
    for n in range(250):
        starts.observe(0.01 * n)  # 0 … 2.49 s
    assert starts.count == 250
    assert math.isclose(starts.sum, 0.01 * sum(range(250)))
    buckets = dict(starts.buckets())
    assert list(buckets) == [*START_BUCKETS, math.inf]
    assert buckets[0.05] == 6  # 0.00 … 0.05: a start of exactly a bound is in its bucket
    assert buckets[1.0] == 101
    assert buckets[2.5] == buckets[120.0] == buckets[math.inf] == 250
    counts = list(buckets.values())
    assert counts == sorted(counts), "cumulative"


def test_a_start_slower_than_every_bound_is_counted_in_inf_only() -> None:
    starts = StartTimes()
    starts.observe(600.0)
    assert dict(starts.buckets())[120.0] == 0
    assert dict(starts.buckets())[math.inf] == 1


def test_tallies_add_up_and_a_copy_is_independent() -> None:
    one, two = StartTimes(), StartTimes()
    one.observe(0.2)
    two.observe(20.0)
    copy = one.copy()
    copy.observe(1.0)
    assert one.count == 1
    total = PoolTally()
    total.add(PoolTally(1, 0, Counter({"code 0": 1}), Counter({"bytes_in": 10}), one))
    total.add(PoolTally(2, 1, Counter({"code 0": 1, "SIGKILL": 1}), Counter({"bytes_in": 5, "timeouts": 1}), two))
    assert (total.spawns, total.restarts) == (3, 1)
    assert total.exits == Counter({"code 0": 2, "SIGKILL": 1})
    assert total.children == Counter({"bytes_in": 15, "timeouts": 1})
    assert total.starts.count == 2
    assert math.isclose(total.starts.sum, 20.2)
