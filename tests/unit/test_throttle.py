"""The log-line token bucket (gateway.protocol.throttle), on an injected clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol.throttle import LineThrottle


def test_a_burst_passes_and_the_rest_is_dropped_and_counted() -> None:
    throttle = LineThrottle(rate=10, burst=3, now=0.0)
    assert [throttle.admit(0.0) for _ in range(5)] == [0, 0, 0, None, None]
    assert throttle.dropped == 2


def test_the_count_comes_back_with_the_first_line_after_the_drops_and_only_once() -> None:
    throttle = LineThrottle(rate=10, burst=1, now=0.0)
    assert throttle.admit(0.0) == 0
    assert throttle.admit(0.05) is None  # half a token
    assert throttle.admit(0.06) is None
    assert throttle.admit(0.1) == 2  # one token again: the two dropped lines are reported
    assert throttle.admit(0.2) == 0
    assert throttle.close() == 0


def test_tokens_refill_at_the_rate_up_to_the_burst() -> None:
    throttle = LineThrottle(rate=2, burst=4, now=0.0)
    assert [throttle.admit(0.0) for _ in range(4)] == [0, 0, 0, 0]
    assert throttle.admit(0.0) is None
    assert [throttle.admit(1.0), throttle.admit(1.0), throttle.admit(1.0)] == [1, 0, None]  # 2 tokens a second
    assert [throttle.admit(100.0) for _ in range(5)] == [1, 0, 0, 0, None]  # never more than the burst


def test_close_hands_back_what_was_never_reported_once() -> None:
    throttle = LineThrottle(rate=1, burst=1, now=5.0)
    throttle.admit(5.0)
    for _ in range(7):
        assert throttle.admit(5.5) is None
    assert (throttle.close(), throttle.close()) == (7, 0)


def test_a_clock_that_goes_back_adds_no_tokens() -> None:
    throttle = LineThrottle(rate=100, burst=1, now=10.0)
    assert throttle.admit(10.0) == 0
    assert throttle.admit(3.0) is None
    assert throttle.admit(10.0) is None  # still no time has passed since 10.0


@pytest.mark.parametrize(("rate", "burst"), [(0, 1), (-1, 1), (1, 0)])
def test_a_throttle_needs_a_rate_and_a_burst(rate: float, burst: int) -> None:
    with pytest.raises(ValueError, match="positive rate"):
        LineThrottle(rate, burst, 0.0)


@given(st.lists(st.floats(min_value=0, max_value=5, allow_nan=False), max_size=200))
def test_every_line_is_let_through_or_counted_and_no_more_than_the_bucket_allows(gaps: list[float]) -> None:
    rate, burst = 4.0, 5
    throttle = LineThrottle(rate, burst, 0.0)
    now, passed, reported = 0.0, 0, 0
    for gap in gaps:
        now += gap
        count = throttle.admit(now)
        if count is not None:
            passed += 1
            reported += count
    reported += throttle.close()
    assert passed + reported == len(gaps)
    assert passed <= burst + now * rate + 1e-6
