"""The access line's log record, made from a template per call site (``log_fast``).

``logging.LogRecord.__init__`` costs the gateway's access line about 19k instructions a
request: the clock, the split of the file name, the level's name, the thread, the process
and, on Python 3.12 and later, the asyncio task. What of that is a function of the call
site (its code object and its offset in it: the file, the module, the line, the function)
is worked out once per site, from a record the record factory made there; what is each
record's own (the call's arguments, the moment, the thread, the process, the task) is set
afresh on every record, as ``LogRecord.__init__`` on this Python sets it. The copy costs
about 12k instructions a request less (``bench.instructions``: 882k → 869k a modern call at
C = 1); the rest is the clock, the thread, the process and the task, read for every record.

That split is checked, not assumed. ``SITE_FIELDS`` and ``CALL_FIELDS`` name every field a
record has, and at import a factory-made record's fields are compared with them; on a
Python whose ``LogRecord`` has a field they do not name (or lacks one they do), the split
is not trusted (``TEMPLATES_FIT`` is false): every record is then made by the factory, and
``tests/unit/test_log_records.py`` fails on that Python, so its CI says so instead of the
records quietly differing. The same tests compare every field of a template's record with
``Logger.makeRecord``'s for the same call, from two threads, from two asyncio tasks, under
each of the ``logging`` module's ``log*`` switches, and with the clock read by both fixed
(the time fields must be the same numbers, not merely close).
"""

from __future__ import annotations

import collections.abc
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from types import CodeType
from typing import Any, Final, TypeAlias

SITE_FIELDS: Final = frozenset({"pathname", "filename", "module", "lineno", "funcName"})
"""Record fields that are a function of the call site: copied from its template."""
CALL_FIELDS: Final = frozenset(
    {
        *("name", "levelno", "levelname", "msg", "args", "exc_info", "exc_text", "stack_info"),  # the call's
        *("created", "msecs", "relativeCreated"),  # the moment's
        *("thread", "threadName", "processName", "process"),  # the context's
        *(("taskName",) if sys.version_info >= (3, 12) else ()),
    }
)
"""Record fields set afresh on every record (a level's name too: ``addLevelName`` may change it)."""
TEMPLATES_FIT: Final = (
    frozenset(vars(logging.LogRecord("", logging.INFO, "", 0, "", (), None))) == SITE_FIELDS | CALL_FIELDS
    and SITE_FIELDS.isdisjoint(CALL_FIELDS)
    and hasattr(os, "getpid")  # what LogRecord asks before it reads the pid
)
"""Whether this Python's records have exactly the fields named above (else no templates)."""
_TASKS: Final = sys.version_info >= (3, 12)
# fenced: logging.LogRecord
_START: Final[float] = logging._startTime  # type: ignore[attr-defined]  # seconds, on 3.13 nanoseconds

_Extended: TypeAlias = tuple[tuple[str, ...], dict[str, Any]]
"""The ``extra`` keys of a site's call, in order, and its template with those keys after its
fields (their values None): what a record made there with such an ``extra`` has, in order."""

MAX_REMEMBERED_LINES: Final = 64
"""Call sites of ``log_fast`` remembered (their line, and their template): they are fixed
lines of the gateway, so this is never reached (the memo is emptied if it is)."""
_sites: dict[tuple[int, int], tuple[CodeType, int, dict[str, Any] | None, _Extended | None]] = {}
"""(id of a code object, offset of the call in it) → (that code object, kept alive, its line,
the fields of a record made there, or None when that record was not the standard one, and
the same fields followed by the ``extra`` keys of the site's last call, or None)."""
_MAKE_RECORD: Final = logging.Logger.makeRecord
_new: Final = logging.LogRecord.__new__  # fenced: logging.LogRecord
_Mapping: Final = collections.abc.Mapping


def log_fast(logger: logging.Logger, level: int, msg: str, args: tuple[Any, ...], extra: dict[str, Any]) -> None:
    """``logger.log(level, msg, *args, extra=extra)`` for a line written on every request: the
    caller's file, line and function are read from its frame, not searched for up the stack.
    The caller checks ``logger.isEnabledFor(level)``.

    A call site is known by its code object and its offset in it: ``f_lineno`` scans the
    code's line table from its start each time (about 9k instructions for the access line,
    at the end of a long function). The memo holds the code object itself, so its id cannot
    be another code's while it is remembered (a code object's own hash would hash its
    bytecode and constants on every call).

    The first record of a site is made by the record factory; its fields are the site's
    template. Later records are a copy of the template with every field of ``CALL_FIELDS``
    set afresh (``_fresh``), when the records are standard ones: the factory is
    ``LogRecord`` itself and the logger's class does not override ``makeRecord`` (read on
    every call), and ``TEMPLATES_FIT``. Otherwise the factory, or the logger's own
    ``makeRecord``, makes each record, as ``Logger.makeRecord`` would. ``extra`` is checked
    and added as ``makeRecord`` does, with set operations instead of its loop over the keys
    (that loop was half the cost of the record: about 10k instructions of a request).

    A site's calls give the same ``extra`` keys in the same order (the access line's 18):
    once a call's keys have passed that check, the site remembers them with a template that
    has them after the record's fields (``_Extended``), and a later call with the same keys
    in the same order (one tuple compared) copies that template and sets the values: the
    dict it makes has the same keys in the same order, without the check again, and without
    growing the record's dict by 18 keys (about 3k instructions a request)."""
    caller = sys._getframe(1)
    code = caller.f_code
    site = (id(code), caller.f_lasti)
    known = _sites.get(site)
    if known is None:
        line = caller.f_lineno
        template = extended = None
        if len(_sites) >= MAX_REMEMBERED_LINES:
            _sites.clear()
    else:
        line, template, extended = known[1], known[2], known[3]
    if type(logger).makeRecord is not _MAKE_RECORD:
        record = logger.makeRecord(logger.name, level, code.co_filename, line, msg, args, None, code.co_name, extra)
        if known is None:
            _sites[site] = (code, line, None, None)
        logger.handle(record)
        return
    factory = logging.getLogRecordFactory()
    remember: tuple[str, ...] | None = None  # this call's extra keys, to remember once checked
    if template is not None and factory is logging.LogRecord:
        keys = remember = tuple(extra)
        # The template with these keys, when they are the ones remembered (checked then).
        with_keys = extended[1] if extended is not None and keys == extended[0] else None
        fields = (template if with_keys is None else with_keys).copy()
        _fresh(fields, logger.name, level, msg, args)
        record = _new(logging.LogRecord)
        record.__dict__ = fields
        if with_keys is not None:
            fields.update(extra)
            logger.handle(record)
            return
    else:
        record = factory(logger.name, level, code.co_filename, line, msg, args, None, code.co_name, None)
        fields = record.__dict__
        standard = TEMPLATES_FIT and factory is logging.LogRecord
        if known is None or (standard and template is None):
            # The template keeps the site's fields, and None for the call's (set on each copy).
            kept = {key: None if key in CALL_FIELDS else value for key, value in fields.items()} if standard else None
            _sites[site] = (code, line, kept, None)
    if "message" in extra or "asctime" in extra or not fields.keys().isdisjoint(extra):
        key = next(key for key in extra if key in ("message", "asctime") or key in fields)
        raise KeyError(f"Attempt to overwrite {key!r} in LogRecord")  # makeRecord's refusal
    if remember is not None and template is not None:  # the keys passed: remembered with the template
        _sites[site] = (code, line, template, (remember, {**template, **dict.fromkeys(extra)}))
    fields.update(extra)
    logger.handle(record)


def _fresh(fields: dict[str, Any], name: str, level: int, msg: str, args: tuple[Any, ...]) -> None:
    """Sets every field of ``CALL_FIELDS`` as ``LogRecord.__init__`` on this Python sets it
    (the ``logging`` module's ``logThreads``, ``logMultiprocessing``, ``logProcesses`` and
    ``logAsyncioTasks`` switches are read on every record, as it reads them)."""
    fields["name"] = name
    fields["msg"] = msg
    if args and len(args) == 1 and isinstance(args[0], _Mapping) and args[0]:
        fields["args"] = args[0]  # LogRecord's "%(key)s" form: one mapping as the arguments
    else:
        fields["args"] = args
    fields["levelname"] = logging.getLevelName(level)
    fields["levelno"] = level
    fields["exc_info"] = fields["exc_text"] = fields["stack_info"] = None
    _stamp(fields)
    if logging.logThreads:
        fields["thread"] = threading.get_ident()
        fields["threadName"] = threading.current_thread().name
    else:
        fields["thread"] = fields["threadName"] = None
    if not logging.logMultiprocessing:
        fields["processName"] = None
    else:
        mp = sys.modules.get("multiprocessing")
        if mp is None:
            fields["processName"] = "MainProcess"
        else:
            try:
                fields["processName"] = mp.current_process().name
            except Exception:  # as LogRecord: multiprocessing is still being imported
                fields["processName"] = "MainProcess"
    fields["process"] = os.getpid() if logging.logProcesses else None
    if _TASKS:
        fields["taskName"] = _task_name()


NS_CLOCK: Final = sys.version_info >= (3, 13)
"""Whether ``LogRecord`` reads the time as ``time.time_ns()`` (3.13 and later), not ``time.time()``."""
clock: Final[Callable[[], float | int]] = time.time_ns if NS_CLOCK else time.time
"""The clock ``LogRecord`` reads for a record's time on this Python (``moment`` makes the fields)."""

if sys.version_info >= (3, 13):

    def moment(ct: float) -> tuple[float, float]:
        """A record's ``created`` and ``msecs`` from a ``clock()`` reading, as ``LogRecord`` (3.13) makes them."""
        created = ct / 1e9
        msecs = (ct % 1_000_000_000) // 1_000_000 + 0.0
        if msecs == 999.0 and int(created) != ct // 1_000_000_000:
            msecs = 0.0  # the division to seconds rounded up to the next second
        return created, msecs

    def _stamp(fields: dict[str, Any]) -> None:
        """The record's time fields, from one ``time.time_ns()`` as ``LogRecord`` (3.13) makes them."""
        ct = time.time_ns()
        created = fields["created"] = ct / 1e9
        msecs = (ct % 1_000_000_000) // 1_000_000 + 0.0
        if msecs == 999.0 and int(created) != ct // 1_000_000_000:
            msecs = 0.0  # the division to seconds rounded up to the next second
        fields["msecs"] = msecs
        fields["relativeCreated"] = (ct - _START) / 1e6

else:

    def moment(ct: float) -> tuple[float, float]:
        """A record's ``created`` and ``msecs`` from a ``clock()`` reading, as ``LogRecord`` (3.11, 3.12) makes them."""
        return ct, int((ct - int(ct)) * 1000) + 0.0

    def _stamp(fields: dict[str, Any]) -> None:
        """The record's time fields, from one ``time.time()`` as ``LogRecord`` (3.11, 3.12) makes them."""
        ct = time.time()
        fields["created"] = ct
        fields["msecs"] = int((ct - int(ct)) * 1000) + 0.0
        fields["relativeCreated"] = (ct - _START) * 1000


if sys.version_info >= (3, 12):

    def _task_name() -> str | None:
        """The running asyncio task's name, as ``LogRecord`` (3.12 and later) reads it."""
        if not logging.logAsyncioTasks:  # type: ignore[attr-defined]  # (not in typeshed)
            return None
        asyncio = sys.modules.get("asyncio")
        if not asyncio:
            return None
        try:
            return asyncio.current_task().get_name()  # type: ignore[no-any-return]
        except Exception:  # as LogRecord: no loop running, or no task
            return None

else:

    def _task_name() -> str | None:  # Python 3.11: records have no taskName (never called)
        return None
