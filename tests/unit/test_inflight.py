"""The registry a POSTed modern ``notifications/cancelled`` looks requests up in."""

from __future__ import annotations

from gateway.http.inflight import InFlight, key_of
from gateway.protocol import loglevels


class Stream:
    def __init__(self) -> None:
        self.cancelled = 0

    def cancel(self) -> None:
        self.cancelled += 1


def test_a_cancel_names_exactly_one_request_of_its_principal_with_the_same_id_type() -> None:
    registry = InFlight()
    alice, bob, anonymous = Stream(), Stream(), Stream()
    with registry.track("alice", 7, alice), registry.track("bob", 7, bob), registry.track(None, "7", anonymous):
        assert len(registry) == 3
        assert not registry.cancel("alice", "7")  # a string is not the integer 7
        assert not registry.cancel("mallory", 7)  # another principal's requests are never found
        assert not registry.cancel(None, 7)
        assert registry.cancel("alice", 7)
        assert registry.cancel(None, "7")
    assert (alice.cancelled, bob.cancelled, anonymous.cancelled) == (1, 0, 1)
    assert len(registry) == 0


def test_two_requests_of_one_principal_with_one_id_are_ambiguous_and_neither_is_cancelled() -> None:
    registry = InFlight()
    first, second = Stream(), Stream()
    with registry.track("dave", 1, first):
        with registry.track("dave", 1, second):
            assert not registry.cancel("dave", 1)
        assert registry.cancel("dave", 1)  # the other one has finished: no longer ambiguous
    assert (first.cancelled, second.cancelled) == (1, 0)


def test_values_that_are_no_request_id_are_neither_tracked_nor_found() -> None:
    registry = InFlight()
    stream = Stream()
    for value in (None, 1.5, True, [1], {"a": 1}):
        assert key_of("p", value) is None
        with registry.track("p", value, stream):
            assert len(registry) == 0
            assert not registry.cancel("p", value)


def test_the_most_verbose_level_wins_and_unknown_levels_are_skipped() -> None:
    assert loglevels.most_verbose(["error", "debug", "warning"]) == "debug"
    assert loglevels.most_verbose([None, "loud", "notice"]) == "notice"
    assert loglevels.most_verbose([None, "loud"]) is None
    assert loglevels.most_verbose([]) is None
