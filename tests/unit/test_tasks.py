"""The Tasks extension's pure rules (``gateway.protocol.tasks``): negotiation, creation, a
task's states, keys and wire shapes, and owner-carrying task ids."""

from __future__ import annotations

import base64
import contextlib
import itertools
import tracemalloc
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol import owner as owners
from gateway.protocol import tasks as rules
from gateway.protocol.jsonrpc import INVALID_PARAMS, MISSING_CLIENT_CAPABILITY
from gateway.protocol.owner import Owner, OwnerError
from gateway.protocol.tasks import Task, TaskPolicy

NOW = 1_800_000_000.0
OPTED_IN = {"extensions": {rules.EXTENSION: {}}}


def wire(message: dict[str, Any]) -> Any:
    """``message`` as a client reads it (a kept outcome is an ``orjson.Fragment`` until written)."""
    return orjson.loads(orjson.dumps(message))


def task(**fields: object) -> Task:
    return Task("t.x", "alice", "srv", NOW, rules.DEFAULT_TTL, **fields)  # type: ignore[arg-type]


def test_a_request_opts_in_only_with_the_extension_object_in_its_capabilities() -> None:
    assert rules.opted_in(OPTED_IN)
    assert not rules.opted_in({})
    assert not rules.opted_in(None)
    assert not rules.opted_in({"extensions": {rules.EXTENSION: True}})
    assert not rules.opted_in({"tasks": {}})  # the 2025-11-25 slot is not the extension


@pytest.mark.parametrize(
    ("support", "patterns", "tool", "wanted"),
    [
        ("optional", (), "build", True),
        ("required", (), "build", True),
        ("forbidden", ("*",), "build", False),  # the child's word wins over a pattern
        (None, ("build*", "crawl"), "build-all", True),
        (None, ("crawl",), "build", False),
        (None, (), "build", False),
    ],
)
def test_a_call_becomes_a_task_when_the_child_marks_it_or_the_operator_names_it(
    support: str | None, patterns: tuple[str, ...], tool: str, wanted: bool
) -> None:
    assert TaskPolicy(tools=patterns).wants(tool, support) is wanted
    assert TaskPolicy(tools=patterns, enabled=False).wants(tool, support) is False


def test_discover_advertises_the_extension_and_drops_the_legacy_tasks_slot() -> None:
    result = rules.advertise({"capabilities": {"tools": {}, "tasks": {"list": {}}, "extensions": {"x/y": {}}}})
    assert result["capabilities"] == {"tools": {}, "extensions": {"x/y": {}, rules.EXTENSION: {}}}


def test_a_child_never_sees_the_extension_but_keeps_the_clients_others() -> None:
    caps = {"sampling": {}, "extensions": {rules.EXTENSION: {}, "x/y": {"a": 1}}}
    assert rules.without_extension(caps) == {"sampling": {}, "extensions": {"x/y": {"a": 1}}}
    assert rules.without_extension({"extensions": {rules.EXTENSION: {}}}) == {}
    same = {"sampling": {}}
    assert rules.without_extension(same) is same


def test_errors_name_the_missing_extension_and_the_unknown_task() -> None:
    missing = rules.missing_extension_error("tasks/get")
    assert missing["code"] == MISSING_CLIENT_CAPABILITY
    assert missing["data"] == {"requiredCapabilities": {"extensions": {rules.EXTENSION: {}}}}
    assert rules.not_found_error("t.1")["code"] == INVALID_PARAMS


def test_the_created_result_is_flat_and_carries_no_outcome() -> None:
    created = task().created_result()
    assert created == {
        "resultType": "task",
        "taskId": "t.x",
        "status": "working",
        "createdAt": "2027-01-15T08:00:00.000Z",
        "lastUpdatedAt": "2027-01-15T08:00:00.000Z",
        "ttlMs": 3_600_000,
        "pollIntervalMs": rules.POLL_INTERVAL_MS,
    }


def test_a_completed_task_inlines_its_result_without_related_task_meta() -> None:
    done = task()
    meta = {rules.RELATED_TASK_META: {"taskId": "t.x"}, "other": 1}
    done.complete({"content": [], "isError": True, "_meta": meta}, NOW + 1.5)
    detailed = wire(done.detailed())
    assert detailed["status"] == rules.COMPLETED
    assert detailed["resultType"] == "complete"
    assert detailed["result"] == {"content": [], "isError": True, "_meta": {"other": 1}}
    assert detailed["lastUpdatedAt"] == "2027-01-15T08:00:01.500Z"
    assert "error" not in detailed


def test_a_failed_task_inlines_its_error_and_a_terminal_state_never_changes() -> None:
    failed = task()
    failed.fail({"code": 1234, "message": "boom"}, NOW + 1)
    failed.complete({"content": []}, NOW + 2)
    failed.cancel(NOW + 3)
    failed.ask({"k1": {"method": "roots/list"}}, NOW + 4)
    assert failed.detailed()["status"] == rules.FAILED
    assert wire(failed.detailed())["error"] == {"code": 1234, "message": "boom"}
    assert "result" not in failed.detailed()


def test_questions_get_keys_unique_over_the_tasks_life_and_only_outstanding_answers_count() -> None:
    asking = task()
    asking.ask({"k1": {"method": "roots/list"}, "k2": {"method": "sampling/createMessage"}}, NOW)
    assert asking.detailed()["inputRequests"] == {
        "q1": {"method": "roots/list"},
        "q2": {"method": "sampling/createMessage"},
    }
    assert asking.take_answers({"q1": {"roots": []}, "nope": {"x": 1}}, NOW) is None  # q2 still open
    assert asking.detailed()["inputRequests"] == {"q2": {"method": "sampling/createMessage"}}
    assert asking.take_answers({"q2": {"content": "hi"}, "q1": {"ignored": True}}, NOW) == {
        "k1": {"roots": []},
        "k2": {"content": "hi"},
    }
    assert asking.status == rules.WORKING
    asking.ask({"k1": {"method": "elicitation/create"}}, NOW)  # the next round reuses the MRTR key k1
    assert asking.detailed()["inputRequests"] == {"q3": {"method": "elicitation/create"}}


def test_a_task_ending_after_its_ttl_is_kept_a_while_longer_and_says_so() -> None:
    late = Task("t.y", "bob", "srv", NOW, 10.0)
    assert late.ttl_ms() == 10_000
    late.complete({"content": []}, NOW + 100)
    assert late.expires_at() == NOW + 100 + rules.MIN_KEEP_AFTER_END
    assert late.ttl_ms() == int((100 + rules.MIN_KEEP_AFTER_END) * 1000)


def test_progress_is_the_status_message_while_working_only() -> None:
    working = task()
    working.note("3/10 — crawling", NOW + 1)
    assert working.detailed()["statusMessage"] == "3/10 — crawling"
    working.cancel(NOW + 2)
    working.note("late", NOW + 3)
    assert working.detailed()["statusMessage"] == "cancelled by the client"


def test_a_task_id_names_its_owner_verified_and_an_unowned_one_names_none() -> None:
    me = Owner("http://10.0.0.1:8000", "boot1")
    keys = owners.IdKeys.derive(b"s" * 32, "task id")
    task_id = rules.mint_task_id(me, keys, b"r" * rules.TASK_RANDOM_BYTES)
    assert task_id.startswith(rules.TASK_ID_PREFIX + owners.SESSION_PREFIX)
    assert rules.task_owner(task_id, [keys]) == me
    assert rules.task_owner(rules.mint_task_id(None, keys, b"r" * 16), [keys]) is None
    with pytest.raises(OwnerError):  # signed with another key (a session id's, say)
        rules.task_owner(task_id, [owners.IdKeys.derive(b"s" * 32, "session id")])
    assert rules.check_owner(task_id[:-2] + "AA", [keys]) is None


def test_a_task_id_shows_no_address_of_its_owner() -> None:
    me = Owner("http://10.0.0.1:8000", "boot1")
    task_id = rules.mint_task_id(me, owners.IdKeys.derive(b"s" * 32, "task id"), b"r" * rules.TASK_RANDOM_BYTES)
    for part in task_id.split("."):
        texts = [part.encode()]
        with contextlib.suppress(ValueError):
            texts.append(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
        for text, piece in itertools.product(texts, (b"10.0.0.1", b"boot1", b"http:")):
            assert piece not in text


def test_an_earlier_versions_task_id_names_no_owner_here() -> None:
    earlier = "t.o1." + base64.urlsafe_b64encode(b"http://10.0.0.1:8000").decode().rstrip("=") + ".boot1.cmFuZA.AAAA"
    assert rules.check_owner(earlier, [owners.IdKeys.derive(b"s" * 32, "task id")]) is None  # "not found" here


@given(st.lists(st.sampled_from(["ask", "answer", "note", "complete", "fail", "cancel"]), max_size=30))
def test_whatever_happens_a_task_ends_at_most_once_and_its_wire_shape_matches_its_status(steps: list[str]) -> None:
    t = task()
    ended_as: str | None = None
    for n, step in enumerate(steps):
        now = NOW + n
        if step == "ask":
            t.ask({"k1": {"method": "roots/list"}}, now)
        elif step == "answer":
            t.take_answers({key: {"roots": []} for key in t.questions}, now)
        elif step == "note":
            t.note("x", now)
        elif step == "complete":
            t.complete({"content": []}, now)
        elif step == "fail":
            t.fail({"code": 1, "message": "m"}, now)
        else:
            t.cancel(now)
        if t.is_terminal and ended_as is None:
            ended_as = t.status
        assert ended_as is None or t.status == ended_as
        detailed = t.detailed()
        assert ("result" in detailed) == (t.status == rules.COMPLETED)
        assert ("error" in detailed) == (t.status == rules.FAILED)
        assert ("inputRequests" in detailed) == (t.status == rules.INPUT_REQUIRED)
        assert "requestState" not in detailed


def test_a_listen_for_task_ids_alone_is_the_gateways_and_a_mixed_one_loses_its_task_ids() -> None:
    only = {"notifications": {"taskIds": ["t.a", 7, "t.b"], "toolsListChanged": False}}
    mixed = {"notifications": {"taskIds": ["t.a"], "toolsListChanged": True}}
    assert rules.listen_task_ids(only) == ["t.a", "t.b"]
    assert rules.listen_task_ids({"notifications": {"toolsListChanged": True}}) is None
    assert rules.listens_only_for_tasks(only)
    assert not rules.listens_only_for_tasks(mixed)
    assert rules.without_task_ids(mixed) == {"notifications": {"toolsListChanged": True}}
    many = {"notifications": {"taskIds": [f"t.{n}" for n in range(1000)]}}
    assert len(rules.listen_task_ids(many) or []) == rules.MAX_LISTENED_TASKS


def test_a_status_notification_carries_the_detailed_task_without_result_type() -> None:
    done = task()
    done.complete({"content": []}, NOW)
    params = wire(rules.status_params(done))
    assert params["status"] == rules.COMPLETED
    assert params["result"] == {"content": []}
    assert "resultType" not in params


def test_a_kept_outcome_holds_exactly_the_bytes_it_counts() -> None:
    # Counted as stored: the serialized outcome, in a bytes object of its own length (orjson's
    # buffer holds up to twice that), and nothing of the parsed result is kept beside it.
    result = {"content": [{"type": "text", "text": f"row {n} " + "x" * 90} for n in range(10_000)]}
    done = task()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        done.complete(result, NOW)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert done.size == len(orjson.dumps(result)) > 1_000_000
    assert done.size <= held <= done.size + 1024
    assert wire(done.detailed())["result"] == result


def test_kept_bytes_are_counted_per_principal_and_the_largest_holder_gives_way_first() -> None:
    kept = rules.KeptBytes(limit=100)
    kept.add("alice", 70)
    kept.add("bob", 20)
    assert kept.over_by() == -10
    kept.add("carol", 30)
    assert kept.over_by() == 20
    assert kept.largest() == "alice"
    kept.remove("alice", 70)
    assert kept.largest() == "carol"
    assert kept.used == 50
    assert dict(kept.by_principal) == {"bob": 20, "carol": 30}
    assert rules.KeptBytes().largest() is None
