"""The pool's supervision policy (gateway/protocol/supervision.py), rule by rule."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol.supervision import (
    BACKOFF_FIRST,
    BACKOFF_MAX,
    CRASH_LOOP,
    QUICK_EXIT,
    ExitKind,
    Supervision,
    Verdict,
    classify,
)


def start_failure(policy: Supervision) -> Verdict:
    return policy.exited(planned=False, started=False, uptime=0.0, charged=False)


def test_an_exit_is_classified_by_the_rules() -> None:
    assert classify(planned=True, started=True, uptime=1.0, charged=True) is ExitKind.PLANNED
    assert classify(planned=False, started=True, uptime=1.0, charged=True) is ExitKind.DIED_SERVING
    assert classify(planned=False, started=False, uptime=99.0, charged=False) is ExitKind.START_FAILURE
    assert classify(planned=False, started=True, uptime=QUICK_EXIT - 0.1, charged=False) is ExitKind.START_FAILURE
    assert classify(planned=False, started=True, uptime=QUICK_EXIT, charged=False) is ExitKind.SERVED
    # retiring before the handshake completed is still a start failure: it never ran
    assert classify(planned=True, started=False, uptime=0.0, charged=False) is ExitKind.START_FAILURE


def test_a_gateway_fault_charges_nobody_and_backs_off_like_a_start_failure() -> None:
    assert classify(planned=True, started=True, uptime=99.0, charged=True, fault=True) is ExitKind.GATEWAY_FAULT
    policy = Supervision()
    verdicts = [policy.exited(planned=False, started=True, uptime=99.0, charged=True, fault=True) for _ in range(3)]
    assert [v.kind for v in verdicts] == [ExitKind.GATEWAY_FAULT] * 3
    assert [v.delay for v in verdicts] == [BACKOFF_FIRST, 2 * BACKOFF_FIRST, 4 * BACKOFF_FIRST]
    assert policy.exited(planned=False, started=True, uptime=99.0, charged=True).delay == 0.0  # died serving


def test_start_failures_back_off_doubling_up_to_the_maximum() -> None:
    policy = Supervision()
    delays = [start_failure(policy).delay for _ in range(12)]
    assert delays[:3] == [BACKOFF_FIRST, 2 * BACKOFF_FIRST, 4 * BACKOFF_FIRST]
    assert delays == sorted(delays)
    assert delays[-1] == BACKOFF_MAX


def test_a_streak_of_any_length_keeps_the_maximum_delay() -> None:
    # 2,000 start failures: a command broken for about 17 h at 30 s apart. The doubling used to
    # overflow a float at the 1,025th (OverflowError in the pool's exit handler).
    policy = Supervision()
    delays = [start_failure(policy).delay for _ in range(2000)]
    assert delays[-1] == BACKOFF_MAX


def test_the_pool_fails_after_a_streak_and_says_so_once() -> None:
    policy = Supervision()
    verdicts = [start_failure(policy) for _ in range(CRASH_LOOP + 2)]
    assert [v.now_failing for v in verdicts] == [False] * (CRASH_LOOP - 1) + [True, False, False]
    assert policy.failing
    assert policy.started() is True  # a start succeeded: no longer failing, said once
    assert not policy.failing
    assert policy.started() is False


def test_a_crash_while_serving_or_an_exit_after_serving_clears_the_streak() -> None:
    for kind in (
        {"started": True, "uptime": 1.0, "charged": True},
        {"started": True, "uptime": 60.0, "charged": False},
    ):
        policy = Supervision()
        start_failure(policy)
        start_failure(policy)
        verdict = policy.exited(planned=False, **kind)  # type: ignore[arg-type]
        assert verdict.delay == 0.0
        assert policy.quick_failures == 0


def test_a_planned_exit_leaves_the_streak_alone() -> None:
    policy = Supervision()
    start_failure(policy)
    verdict = policy.exited(planned=True, started=True, uptime=60.0, charged=False)
    assert verdict.kind is ExitKind.PLANNED
    assert verdict.delay == BACKOFF_FIRST
    assert policy.quick_failures == 1


@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.floats(0, 100), st.booleans()), max_size=40))
def test_failing_is_set_only_by_a_streak_and_the_delay_is_bounded(
    exits: list[tuple[bool, bool, float, bool]],
) -> None:
    policy = Supervision()
    streak = 0
    for planned, started, uptime, charged in exits:
        verdict = policy.exited(planned=planned, started=started, uptime=uptime, charged=charged)
        if verdict.kind is ExitKind.START_FAILURE:
            streak += 1
        elif verdict.kind is not ExitKind.PLANNED:
            streak = 0
        assert policy.quick_failures == streak
        assert 0.0 <= verdict.delay <= BACKOFF_MAX
        assert (verdict.delay == 0.0) == (streak == 0)
        if verdict.now_failing:
            assert streak == CRASH_LOOP
