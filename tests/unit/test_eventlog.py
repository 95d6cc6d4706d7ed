"""The pure bookkeeping of resumable streams (``gateway.protocol.eventlog``): ids, replay,
retention per stream / session / process, forgetting, and the answers to bad resumes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol import eventlog
from gateway.protocol.eventlog import Budget, Closed, EventLog, Gone, Replay, Unknown, parse_event_id, primes


def test_ids_name_their_stream_and_count_its_events_from_one() -> None:
    log = EventLog(Budget())
    a, b = log.open("ka", 1), log.open("kb", 2)
    assert [log.append(a, b"x"), log.append(a, b"y"), log.append(b, b"z")] == [1, 2, 1]
    assert a.event_id(2) == "ka.2"
    assert parse_event_id("ka.2") == ("ka", 2)
    assert parse_event_id("key.with.dots.7") == ("key.with.dots", 7)
    for bad in ("", "ka", "ka.", ".3", "ka.-1", "ka.1e3", "ka.٣", "k" * 200 + ".1"):
        assert parse_event_id(bad) is None


def test_a_resume_replays_only_its_own_streams_events_after_the_id() -> None:
    log = EventLog(Budget())
    a, b = log.open("ka", 1), log.open("kb", 2)
    for data in (b"a1", b"a2", b"a3"):
        log.append(a, data)
    log.append(b, b"b1")
    found = log.resume("ka.1")
    assert isinstance(found, Replay)
    assert found.stream is a
    assert found.events == [(2, b"a2"), (3, b"a3")]
    priming = log.resume("ka.0")  # from the priming event: everything
    assert isinstance(priming, Replay)
    assert [n for n, _ in priming.events] == [1, 2, 3]


def test_unknown_ids_are_unknown() -> None:
    log = EventLog(Budget())
    a = log.open("ka", 1)
    log.append(a, b"x")
    assert isinstance(log.resume("nonsense"), Unknown)
    assert isinstance(log.resume("other.1"), Unknown)  # another session's key is not in this log
    assert isinstance(log.resume("ka.5"), Unknown)  # never sent


def test_a_stream_keeps_at_most_its_events_and_bytes_and_a_resume_before_them_is_gone() -> None:
    log = EventLog(Budget(), stream_max_events=3, stream_max_bytes=10)
    a = log.open("ka", 7)
    for n in range(5):
        log.append(a, b"%d" % n)
    assert [n for n, _ in a.events] == [3, 4, 5]
    assert isinstance(log.resume("ka.2"), Replay)  # 3, 4, 5 are all kept
    gone = log.resume("ka.1")
    assert isinstance(gone, Gone)
    assert gone.request_id == 7
    log.append(a, b"123456789")  # bytes: the older ones go
    assert [n for n, _ in a.events] == [5, 6]
    log.append(a, b"x" * 11)  # larger than a stream keeps: not kept, and a resume before it is gone
    assert isinstance(log.resume("ka.6"), Gone)
    assert a.size == log.size == log.budget.used == 0


def test_a_session_over_its_bytes_drops_its_finished_streams_first_never_another_sessions() -> None:
    budget = Budget()
    mine, theirs = EventLog(budget, session_max_bytes=10), EventLog(budget, session_max_bytes=10)
    done, running = mine.open("done", 1), mine.open("run", 2)
    other = theirs.open("other", 1)
    mine.append(done, b"12345")
    mine.finish(done)
    theirs.append(other, b"12345678")
    mine.append(running, b"1234")
    mine.append(running, b"12")  # 11 > 10: the finished stream goes
    assert "done" not in mine.streams
    assert isinstance(mine.resume("done.1"), Gone)  # a tombstone answers for it
    assert theirs.size == 8  # untouched
    mine.append(running, b"123456")  # then its own oldest
    assert [n for n, _ in running.events] == [2, 3]
    assert budget.used == mine.size + theirs.size


def test_over_the_process_budget_a_session_sheds_its_own_and_an_event_that_still_does_not_fit_is_not_kept() -> None:
    budget = Budget(limit=10)
    mine, theirs = EventLog(budget), EventLog(budget)
    other = theirs.open("other", 1)
    theirs.append(other, b"12345678")
    a = mine.open("ka", 1)
    mine.append(a, b"1")
    mine.append(a, b"12345")  # 8 + 1 + 5 > 10: sheds its "1", still over: not kept
    assert list(a.events) == []
    assert a.first_kept == 3
    assert theirs.size == 8  # nobody else's events are given up
    assert budget.used == 8


def test_finished_streams_beyond_the_bound_and_streams_nobody_reads_are_forgotten() -> None:
    log = EventLog(Budget(), max_finished=2)
    streams = [log.open(f"k{n}", n) for n in range(3)]
    for stream in streams:
        log.append(stream, b"x")
        log.finish(stream)
    assert list(log.streams) == ["k1", "k2"]
    log.streams["k1"].unattended_since = 10.0
    assert log.expire(69.0, 60.0) == []
    assert [s.key for s in log.expire(70.0, 60.0)] == ["k1"]
    gone = log.resume("k1.1")
    assert isinstance(gone, Gone)
    assert "nobody resumed" in gone.reason
    log.close()
    assert log.size == log.budget.used == 0
    assert isinstance(log.resume("k2.1"), Unknown)


def test_tombstones_are_bounded() -> None:
    log = EventLog(Budget())
    for n in range(eventlog.MAX_TOMBSTONES + 5):
        log.forget(log.open(f"k{n}", n), "why")
    assert len(log.tombstones) == eventlog.MAX_TOMBSTONES
    assert isinstance(log.resume("k0.1"), Unknown)


def test_a_sealed_stream_is_closed_to_a_resume_kept_or_forgotten_before() -> None:
    log = EventLog(Budget())
    running, ended = log.open("run", 1), log.open("end", 2)
    for stream in (running, ended):
        log.append(stream, b"progress")
    log.forget(ended, "the call was cancelled before its result")  # the call's end came first
    for stream in (running, ended):
        log.seal(stream, "the client cancelled its request")
    for key in ("run", "end"):
        for n in (0, 1):  # from the priming event or the last one: nothing, for either
            closed = log.resume(f"{key}.{n}")
            assert closed == Closed(key, "the client cancelled its request")
    assert log.size == log.budget.used == 0  # a sealed stream's events are dropped at once
    log.forget(running, "a later end changes nothing")
    assert isinstance(log.resume("run.1"), Closed)


def test_priming_and_polling_start_with_2025_11_25() -> None:
    assert primes("2025-11-25")
    assert not primes("2025-06-18")
    assert not primes("2025-03-26")


@given(st.lists(st.tuples(st.integers(0, 2), st.binary(max_size=40)), max_size=60))
def test_the_bytes_kept_always_add_up_and_stay_within_every_bound(appends: list[tuple[int, bytes]]) -> None:
    budget = Budget(limit=300)
    logs = [EventLog(budget, stream_max_events=5, stream_max_bytes=100, session_max_bytes=150) for _ in range(2)]
    streams = [(log, log.open(f"s{n}", n)) for n, log in enumerate(logs)]
    streams.append((logs[0], logs[0].open("s2", 2)))
    last_n: dict[str, int] = {}
    for which, data in appends:
        log, stream = streams[which]
        n = log.append(stream, data)
        assert n == last_n.get(stream.key, 0) + 1
        last_n[stream.key] = n
        kept = [k for k, _ in stream.events]
        assert kept == sorted(kept)
        assert len(kept) <= 5
        assert stream.size == sum(len(d) for _, d in stream.events) <= 100
        if kept:  # a replay from just before the oldest kept event gives everything kept
            found = log.resume(stream.event_id(kept[0] - 1))
            assert isinstance(found, Replay)
            assert [k for k, _ in found.events] == kept
    for log in logs:
        assert log.size == sum(s.size for s in log.streams.values()) <= 150
    assert budget.used == sum(log.size for log in logs) <= 300
