"""The access line's records, copied from a template per call site, are the records
``Logger.makeRecord`` makes, field for field, on the running Python.

Only the standard library, pytest and ``gateway.ops.records`` are used, so the module runs
under any interpreter: ``python3.12 -m pytest --noconftest -c /dev/null tests/unit/test_log_records.py``.
A Python whose ``LogRecord`` gains or loses a field fails
``test_the_named_fields_are_every_field_of_a_record_on_this_python`` and
``test_a_known_site_makes_its_records_without_the_record_factory``: the gateway then makes
every record with the factory, and CI on that Python says why.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.ops import records
from gateway.ops.records import CALL_FIELDS, MAX_REMEMBERED_LINES, SITE_FIELDS, TEMPLATES_FIT, log_fast

TIMES = ("created", "msecs", "relativeCreated")
WAIT = 10.0  # seconds a test thread may take, at most


class Keep(logging.Handler):
    """Keeps every record it is handed (``handled``), and a copy of it as it was handed
    (``records``): a handler after it may format it, which adds fields (pytest, since 9.2,
    adds its own handler to the loggers that do not propagate)."""

    def __init__(self) -> None:
        super().__init__()
        self.handled: list[logging.LogRecord] = []
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.handled.append(record)
        self.records.append(copy.copy(record))


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger("tests.records")
    logger.handlers[:] = [Keep()]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    yield logger
    logger.handlers[:] = []


def kept(logger: logging.Logger) -> list[logging.LogRecord]:
    handler = logger.handlers[0]
    assert isinstance(handler, Keep)
    return handler.records


def made_and_fast(
    logger: logging.Logger,
    level: int = logging.INFO,
    msg: str = "%s %d",
    args: tuple[Any, ...] = ("POST", 200),
    extra: dict[str, Any] | None = None,
) -> tuple[logging.LogRecord, logging.LogRecord, logging.LogRecord]:
    """``makeRecord``'s record for the call ``log_fast`` makes here, just before and just after
    it, and ``log_fast``'s own: the second of two from this one call site, so from its template."""
    extra = {"event": "request", "status": 200} if extra is None else extra
    code = sys._getframe().f_code

    def made() -> logging.LogRecord:
        return logger.makeRecord(logger.name, level, code.co_filename, line, msg, args, None, code.co_name, extra)

    line = sys._getframe().f_lineno + 3
    before = made()
    for _ in range(2):
        log_fast(logger, level, msg, args, extra)
    after = made()
    return before, kept(logger)[-1], after


def assert_same(before: logging.LogRecord, fast: logging.LogRecord, after: logging.LogRecord) -> None:
    """``fast`` has ``makeRecord``'s fields, in its order, and their values; its time is
    between the two ``makeRecord`` records' (not a wall-clock assertion: an ordering)."""
    assert list(vars(fast)) == list(vars(before))
    assert {k: v for k, v in vars(fast).items() if k not in TIMES} == {
        k: v for k, v in vars(before).items() if k not in TIMES
    }
    assert before.created <= fast.created <= after.created
    assert before.relativeCreated <= fast.relativeCreated <= after.relativeCreated
    assert type(fast.msecs) is float
    assert 0.0 <= fast.msecs < 1000.0


def count_record_inits(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The ``msg`` of every ``LogRecord.__init__`` from now on (the record factory's work)."""
    inits: list[object] = []
    init = logging.LogRecord.__init__

    def counted(self: logging.LogRecord, *args: Any, **kwargs: Any) -> None:
        inits.append(args[4])
        init(self, *args, **kwargs)

    monkeypatch.setattr(logging.LogRecord, "__init__", counted)
    return inits


def test_the_named_fields_are_every_field_of_a_record_on_this_python() -> None:
    """Fails on a Python whose records have a field ``records`` does not name as the site's
    or the call's (or lack one it names): the template would copy it from another call."""
    fields = frozenset(vars(logging.getLogRecordFactory()("n", logging.INFO, __file__, 1, "m", (), None)))
    assert SITE_FIELDS.isdisjoint(CALL_FIELDS)
    assert fields == SITE_FIELDS | CALL_FIELDS
    assert ("taskName" in fields) == (sys.version_info >= (3, 12))
    assert TEMPLATES_FIT


def test_a_known_site_makes_its_records_without_the_record_factory(
    logger: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    made_and_fast(logger)  # the site is known, its template made
    inits = count_record_inits(monkeypatch)
    made_and_fast(logger, msg="template %s", args=("made",))
    assert inits == ["template %s"] * 2  # makeRecord's two only
    assert kept(logger)[-1].getMessage() == "template made"


def test_a_fast_record_is_the_one_make_record_makes(logger: logging.Logger) -> None:
    assert_same(*made_and_fast(logger))
    assert_same(*made_and_fast(logger, logging.WARNING, "other %s", ("x",), {"status": 404}))  # same site
    assert_same(*made_and_fast(logger, logging.DEBUG, "no args", (), {}))
    before, fast, after = made_and_fast(logger, msg="%(a)s and %(b)s", args=({"a": 1, "b": 2},))
    assert_same(before, fast, after)
    assert fast.args == {"a": 1, "b": 2}  # one mapping is the arguments, as LogRecord takes it
    assert fast.getMessage() == "1 and 2"
    assert_same(*made_and_fast(logger, msg="%s", args=({},)))  # an empty one is not


def test_a_fast_record_from_another_logger_at_the_same_site_carries_its_own_name(logger: logging.Logger) -> None:
    made_and_fast(logger)
    other = logging.getLogger("tests.records.other")
    other.handlers[:], other.propagate = logger.handlers, False
    try:
        before, fast, after = made_and_fast(other)
    finally:
        other.handlers[:] = []
    assert_same(before, fast, after)
    assert fast.name == "tests.records.other"


def test_a_level_renamed_after_the_template_is_named_anew(logger: logging.Logger) -> None:
    made_and_fast(logger)
    logging.addLevelName(logging.INFO, "NOTE")
    try:
        before, fast, after = made_and_fast(logger)
    finally:
        logging.addLevelName(logging.INFO, "INFO")
    assert_same(before, fast, after)
    assert fast.levelname == "NOTE"


def test_records_from_two_threads_each_carry_their_own_thread(logger: logging.Logger) -> None:
    made_and_fast(logger)  # the template is made on this thread
    seen: dict[str, tuple[int, tuple[logging.LogRecord, logging.LogRecord, logging.LogRecord]]] = {}

    first_logged, second_logged = threading.Event(), threading.Event()

    def work(after: threading.Event | None, then: threading.Event) -> None:
        # One logs after the other (each finds the last record its own), and the first is
        # still running while the second logs, so the two threads cannot share an ident.
        if after is None or after.wait(WAIT):
            seen[threading.current_thread().name] = (threading.get_ident(), made_and_fast(logger))
        then.set()
        if after is None:
            second_logged.wait(WAIT)

    threads = [
        threading.Thread(target=work, args=(None, first_logged), name="worker-1"),
        threading.Thread(target=work, args=(first_logged, second_logged), name="worker-2"),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive()
    assert set(seen) == {"worker-1", "worker-2"}
    for name, (ident, triple) in seen.items():
        assert_same(*triple)
        assert (triple[1].threadName, triple[1].thread) == (name, ident)
    assert seen["worker-1"][0] != seen["worker-2"][0]


def test_a_record_carries_the_process_name_of_its_moment(
    logger: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process may be renamed (and a forked child is another process): the name is read
    for each record, as ``LogRecord`` reads it, from ``multiprocessing`` once it is imported."""
    monkeypatch.delitem(sys.modules, "multiprocessing", raising=False)
    before, fast, after = made_and_fast(logger)  # the template, and a record, without multiprocessing
    assert_same(before, fast, after)
    assert fast.processName == "MainProcess"
    monkeypatch.undo()
    import multiprocessing

    monkeypatch.setattr(multiprocessing.current_process(), "name", "renamed")
    before, fast, after = made_and_fast(logger)
    assert_same(before, fast, after)
    assert fast.processName == "renamed"


def test_records_from_two_asyncio_tasks_each_carry_their_own_task(logger: logging.Logger) -> None:
    """On Python 3.12 and later a record names its asyncio task (``taskName``); on 3.11 it
    has no such field, in ``makeRecord``'s records as in ours."""
    triples: dict[str, tuple[logging.LogRecord, logging.LogRecord, logging.LogRecord]] = {}
    outside_a_task: list[tuple[logging.LogRecord, logging.LogRecord, logging.LogRecord]] = []

    async def request(name: str) -> None:
        triples[name] = made_and_fast(logger)  # no await inside: the last record is this task's

    async def main() -> None:
        await asyncio.gather(
            asyncio.create_task(request("first"), name="request-1"),
            asyncio.create_task(request("second"), name="request-2"),
        )
        done = asyncio.Event()
        asyncio.get_running_loop().call_soon(lambda: (outside_a_task.append(made_and_fast(logger)), done.set()))
        await asyncio.wait_for(done.wait(), WAIT)

    made_and_fast(logger)  # the template is made with no loop running
    asyncio.run(main())
    for triple in (*triples.values(), *outside_a_task, made_and_fast(logger)):
        assert_same(*triple)
    names = [getattr(triples[name][1], "taskName", "absent") for name in ("first", "second")]
    others = [
        getattr(outside_a_task[0][1], "taskName", "absent"),
        getattr(made_and_fast(logger)[1], "taskName", "absent"),
    ]
    if sys.version_info >= (3, 12):
        assert (names, others) == (["request-1", "request-2"], [None, None])
    else:
        assert (names, others) == (["absent", "absent"], ["absent", "absent"])


SWITCHES = ["logThreads", "logProcesses", "logMultiprocessing"] + (
    ["logAsyncioTasks"] if sys.version_info >= (3, 12) else []
)


@pytest.mark.parametrize("switch", SWITCHES)
def test_records_made_with_a_logging_switch_off_leave_out_what_it_leaves_out(
    logger: logging.Logger, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    made_and_fast(logger)  # the template is made with every switch on

    async def in_a_task() -> tuple[logging.LogRecord, logging.LogRecord, logging.LogRecord]:
        return made_and_fast(logger)

    monkeypatch.setattr(logging, switch, False)
    triple = asyncio.run(in_a_task())
    assert_same(*triple)
    fast = vars(triple[1])
    left_out = {
        "logThreads": ("thread", "threadName"),
        "logProcesses": ("process",),
        "logMultiprocessing": ("processName",),
        "logAsyncioTasks": ("taskName",),
    }[switch]
    assert [fast[key] for key in left_out] == [None] * len(left_out)


@pytest.mark.parametrize(
    "ns",
    [
        1_700_000_000_000_000_000,
        1_700_000_000_123_456_789,
        1_700_000_000_999_499_999,
        1_677_903_920_999_998_503,  # 999 ms
        1_677_903_920_999_999_900,  # to seconds, rounds up to the next second: 3.13 says 0 ms
        1_800_000_061_500_000_001,
    ],
)
def test_the_time_fields_are_the_ones_log_record_computes_from_the_same_clock(
    logger: logging.Logger, monkeypatch: pytest.MonkeyPatch, ns: int
) -> None:
    """With both clocks fixed to one instant, the time fields are the same numbers: the
    template's copy computes them as this Python's ``LogRecord.__init__`` does."""
    made_and_fast(logger)
    clock = SimpleNamespace(time=lambda: ns / 1e9, time_ns=lambda: ns)
    monkeypatch.setattr(logging, "time", clock)  # LogRecord's module reads ``time.time[_ns]()``
    monkeypatch.setattr(records, "time", clock)
    before, fast, _ = made_and_fast(logger)
    assert [getattr(fast, key) for key in TIMES] == [getattr(before, key) for key in TIMES]
    assert [type(getattr(fast, key)) for key in TIMES] == [float] * 3


def test_every_call_field_is_set_afresh_on_every_copy(logger: logging.Logger) -> None:
    made_and_fast(logger)
    made_and_fast(logger)  # the site's extra keys are remembered with its template
    poison = object()
    extended = 0
    for _, _, template, with_keys in records._sites.values():
        if template is not None:
            template.update(dict.fromkeys(CALL_FIELDS, poison))
        if with_keys is not None:  # the template followed by the extra keys: every value is the call's
            keys, fields = with_keys
            fields.update(dict.fromkeys((*CALL_FIELDS, *keys), poison))
            extended += 1
    assert extended
    before, fast, after = made_and_fast(logger)
    assert poison not in vars(fast).values()
    assert_same(before, fast, after)


def test_a_site_called_with_other_extra_keys_or_another_order_makes_their_record(logger: logging.Logger) -> None:
    """A site remembers the extra keys of its last checked call: another set of keys, the same
    keys in another order, or a refused key is a record as ``makeRecord`` makes it, again."""
    for extra in [
        {"event": "request", "status": 200},
        {"event": "request", "status": 404},  # the remembered keys
        {"status": 200, "event": "request"},  # the same keys, another order
        {"status": 200, "event": "request", "peer": None},
        {},
        {"event": "request", "status": 200},
    ]:
        for _ in range(2):
            before, fast, after = made_and_fast(logger, extra=extra)
            assert_same(before, fast, after)
            if extra:
                assert list(vars(fast))[-len(extra) :] == list(extra)

    def fast(extra: dict[str, Any]) -> None:
        log_fast(logger, logging.INFO, "m", (), extra)

    usual = {"event": "request", "status": 200}
    for _ in range(3):  # the template, then the keys remembered, then a copy of both
        fast(usual)
    refused = {**usual, "lineno": 1}
    expected = refusal(lambda: logger.makeRecord(logger.name, logging.INFO, "f", 1, "m", (), None, "f", refused))
    assert expected is not None
    assert refusal(lambda: fast(refused)) == expected
    fast(usual)
    assert kept(logger)[-1].status == 200  # type: ignore[attr-defined]


def refusal(call: Callable[[], object]) -> str | None:
    """The text of the KeyError ``call`` raises, or None when it raises none."""
    try:
        call()
    except KeyError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("key", sorted(SITE_FIELDS | CALL_FIELDS | {"taskName", "message", "asctime", "status"}))
def test_an_extra_is_refused_where_make_record_refuses_it(logger: logging.Logger, key: str) -> None:
    def fast(extra: dict[str, Any]) -> None:
        log_fast(logger, logging.INFO, "m", (), extra)

    fast({})  # the site's template: the refusal below is the copy's
    extra = {"status": 1, key: "x"}
    expected = refusal(lambda: logger.makeRecord(logger.name, logging.INFO, "f", 1, "m", (), None, "f", extra))
    assert refusal(lambda: fast(extra)) == expected
    assert (expected is None) == (key == "status" or (key == "taskName" and sys.version_info < (3, 12)))


def test_a_custom_record_factory_set_after_the_template_makes_the_records(logger: logging.Logger) -> None:
    made_and_fast(logger)
    standard = logging.getLogRecordFactory()
    made: list[logging.LogRecord] = []

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = standard(*args, **kwargs)
        made.append(record)
        return record

    logging.setLogRecordFactory(factory)
    try:
        before, fast, after = made_and_fast(logger)
    finally:
        logging.setLogRecordFactory(standard)
    handler = logger.handlers[0]
    assert isinstance(handler, Keep)
    assert handler.handled[-2:] == made[1:3]  # made: makeRecord's, log_fast's two, makeRecord's
    assert_same(before, fast, after)


def test_a_python_whose_records_have_other_fields_makes_every_record_with_the_factory(
    logger: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(records, "TEMPLATES_FIT", False)
    site = compile("for _ in range(3): log_fast(logger, logging.INFO, 'm %s', ('x',), {})", "<fit>", "exec")
    inits = count_record_inits(monkeypatch)
    exec(site, {"log_fast": log_fast, "logger": logger, "logging": logging})
    assert inits == ["m %s"] * 3
    assert [record.getMessage() for record in kept(logger)] == ["m x"] * 3


def test_the_memo_of_call_sites_stays_within_its_bound(logger: logging.Logger) -> None:
    for many in range(2 * MAX_REMEMBERED_LINES + 1):
        site = compile("\n" * many + "log_fast(logger, logging.INFO, 'm', (), {})\n" * 2, "<site>", "exec")
        exec(site, {"log_fast": log_fast, "logger": logger, "logging": logging})
        assert len(records._sites) <= MAX_REMEMBERED_LINES
        assert [record.lineno for record in kept(logger)[-2:]] == [many + 1, many + 2]
        assert kept(logger)[-1].funcName == "<module>"
