"""The attribution rules (``gateway.protocol.attribution``): who may join a child, whose question it is."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol.attribution import (
    MAX_LEARNED_TOOLS,
    Ambiguous,
    AskPolicy,
    Attributed,
    ToolLearning,
    Unattributable,
    admits,
    attribute,
    is_exclusive,
    may_ask,
    resolve,
    tool_key,
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
    admitted = admits(asking, questions, asks=may_ask(method), exclusive=exclusive)
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


def test_a_tool_is_known_by_its_request_kind_and_name_and_reads_are_one() -> None:
    assert tool_key("tools/call", {"name": "search"}) == "tools/call search"
    assert tool_key("prompts/get", {"name": "search"}) == "prompts/get search"
    assert tool_key("resources/read", {"uri": "file:///a"}) == tool_key("resources/read", {"uri": "file:///b"})
    assert tool_key("tools/call", {"name": 7}) == tool_key("tools/call", None) == "tools/call"
    assert all(tool_key(method, {"name": "x"}) is None for method in NOT_ASKING)


def test_under_auto_a_quiet_tool_shares_a_legacy_child_and_always_and_never_ignore_what_was_learned() -> None:
    told = {"sampling": {}}
    auto = AskPolicy.AUTO
    assert not is_exclusive(auto, learned=False, legacy=True, declared=told, quiet=True)
    assert not is_exclusive(auto, learned=True, legacy=True, declared=told, quiet=True)
    assert is_exclusive(auto, learned=False, legacy=True, declared=told, quiet=False)
    assert is_exclusive(auto, learned=True, legacy=False, declared={}, quiet=True)  # modern: as before
    assert is_exclusive(AskPolicy.ALWAYS, learned=False, legacy=True, declared=told, quiet=True)
    assert not is_exclusive(AskPolicy.NEVER, learned=True, legacy=True, declared=told, quiet=False)


def test_a_tool_that_asked_is_never_quiet_again() -> None:
    tools = ToolLearning()
    assert not tools.is_quiet("tools/call a")
    assert not tools.is_quiet(None)
    assert tools.note_quiet("tools/call a")
    assert not tools.note_quiet("tools/call a")  # already known
    assert tools.is_quiet("tools/call a")
    assert tools.note_asked({"tools/call a", "tools/call b"}) == ["tools/call a"]
    assert not tools.is_quiet("tools/call a")
    assert not tools.note_quiet("tools/call a")
    assert not tools.note_quiet("tools/call b")
    assert tools.asking == {"tools/call a", "tools/call b"}


def test_past_the_limit_no_tool_is_learned_quiet_and_a_quiet_one_that_asks_still_turns_asking() -> None:
    assert MAX_LEARNED_TOOLS == 1024
    tools = ToolLearning(limit=2)
    assert tools.note_quiet("a")
    assert tools.note_quiet("b")
    assert not tools.note_quiet("c")  # full: an unknown tool stays may-ask
    tools.note_asked(["c"])  # no room to record it; it is not quiet either way
    assert not tools.is_quiet("c")
    tools.note_asked(["a"])  # swapped, not dropped: it can never be learned quiet again
    assert tools.asking == {"a"}
    assert tools.quiet == {"b"}
    assert not tools.note_quiet("a")
    assert not tools.note_quiet("c")


@given(
    events=st.lists(st.tuples(st.booleans(), st.sampled_from("abcdefgh")), max_size=40),
    limit=st.integers(0, 5),
)
def test_learning_is_bounded_and_a_tool_seen_asking_is_never_quiet(events: list[tuple[bool, str]], limit: int) -> None:
    tools = ToolLearning(limit=limit)
    asked: set[str] = set()
    for asking, key in events:
        if asking:
            tools.note_asked([key])
            asked.add(key)
        else:
            tools.note_quiet(key)
        assert len(tools.quiet) + len(tools.asking) <= limit
        assert not tools.quiet & asked
        assert not tools.quiet & tools.asking


def test_a_quiet_tool_joins_a_child_whose_question_waits_and_an_asker_does_not() -> None:
    held = (1, 1)  # an asker's question is parked there: one asking request, one open question
    call, listing = may_ask("tools/call"), may_ask("tools/list")
    assert admits(*held, asks=call, exclusive=True, quiet=True)
    assert not admits(*held, asks=call, exclusive=True)
    assert not admits(*held, asks=call, exclusive=False)
    assert admits(*held, asks=listing, exclusive=True)
