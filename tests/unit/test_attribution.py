"""The attribution rules (``gateway.protocol.attribution``): who may join a child, whose question it is."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol.attribution import (
    Ambiguous,
    AskPolicy,
    Attributed,
    ChildLoad,
    Unattributable,
    admits,
    attribute,
    is_exclusive,
    may_ask,
    resolve,
)

ASKING = ["tools/call", "prompts/get", "resources/read"]
NOT_ASKING = ["tools/list", "resources/list", "ping", "subscriptions/listen", "server/discover", None]


def test_only_calls_reads_and_prompts_may_ask() -> None:
    assert all(may_ask(method) for method in ASKING)
    assert not any(may_ask(method) for method in NOT_ASKING)


def test_auto_assumes_a_legacy_child_told_it_may_ask_for_sampling_or_elicitation_asks() -> None:
    auto = AskPolicy.AUTO
    assert is_exclusive(auto, learned=False, legacy=True, declared={"sampling": {}})
    assert is_exclusive(auto, learned=False, legacy=True, declared={"elicitation": {}, "roots": {}})
    # Told only roots, or nothing: a compliant child never asks mid-call, until it does.
    assert not is_exclusive(auto, learned=False, legacy=True, declared={"roots": {}})
    assert not is_exclusive(auto, learned=False, legacy=True, declared={})
    assert is_exclusive(auto, learned=True, legacy=True, declared={})
    # A modern child answers input_required instead of asking: nothing to attribute.
    assert not is_exclusive(auto, learned=False, legacy=False, declared={"sampling": {}})
    assert is_exclusive(auto, learned=True, legacy=False, declared={})


def test_always_and_never_override_what_was_learned_and_declared() -> None:
    for learned in (False, True):
        for legacy in (False, True):
            assert is_exclusive(AskPolicy.ALWAYS, learned=learned, legacy=legacy, declared={})
            assert not is_exclusive(AskPolicy.NEVER, learned=learned, legacy=legacy, declared={"sampling": {}})


@given(
    asking=st.integers(0, 5),
    questions=st.integers(0, 3),
    exclusive=st.booleans(),
    method=st.sampled_from(ASKING + NOT_ASKING),
)
def test_a_request_that_may_ask_never_joins_a_child_where_a_question_could_be_someone_elses(
    asking: int, questions: int, exclusive: bool, method: str | None
) -> None:
    admitted = admits(ChildLoad(asking, questions), method, exclusive=exclusive)
    if not may_ask(method):
        assert admitted  # lists and pings share children freely
    elif questions:
        assert not admitted  # a question is open: any new candidate would make it ambiguous
    elif exclusive:
        assert admitted == (asking == 0)
    else:
        assert admitted


def test_a_question_goes_to_the_one_candidate_or_is_unattributable_or_held() -> None:
    assert attribute(["a"]) == Attributed("a")
    assert attribute([]) == Unattributable()
    assert attribute(["a", "b"]) == Ambiguous(frozenset({"a", "b"}))


@given(
    held=st.lists(st.frozensets(st.integers(0, 6), min_size=2), max_size=5),
    in_flight=st.frozensets(st.integers(0, 6)),
)
def test_a_held_question_goes_only_to_a_candidate_that_is_still_in_flight(
    held: list[frozenset[int]], in_flight: frozenset[int]
) -> None:
    outcomes = resolve(held, in_flight)
    assert len(outcomes) == len(held)
    for candidates, outcome in zip(held, outcomes, strict=True):
        remaining = candidates & in_flight
        if isinstance(outcome, Attributed):
            assert remaining == {outcome.owner}
        elif isinstance(outcome, Ambiguous):
            assert outcome.candidates == remaining
            assert len(remaining) > 1
        else:
            assert remaining == set()
