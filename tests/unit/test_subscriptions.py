"""Sans-IO parts of subscriptions/listen and log levels: what is honoured, tagging, routing."""

from __future__ import annotations

from gateway.protocol import loglevels, subscriptions
from gateway.protocol.correlation import Correlator, Late, ProgressFor, ReplyFor, Unsolicited
from gateway.protocol.jsonrpc import Notification, Result

SUB = subscriptions.SUBSCRIPTION_ID_KEY


def test_only_list_changed_the_child_advertises_is_honoured() -> None:
    capabilities = {"tools": {"listChanged": True}, "prompts": {}, "resources": {"listChanged": False}}
    asked = {"toolsListChanged": True, "promptsListChanged": True, "resourcesListChanged": True}
    assert subscriptions.honoured(asked, capabilities) == {"toolsListChanged": True}
    assert subscriptions.honoured({"toolsListChanged": False}, capabilities) == {}


def test_resource_uris_need_resources_subscribe() -> None:
    asked = {"resourceSubscriptions": ["file:///a", "file:///a", 3, "file:///b"]}
    assert subscriptions.requested_uris(asked, {"resources": {"subscribe": True}}) == ["file:///a", "file:///b"]
    assert subscriptions.requested_uris(asked, {"resources": {"listChanged": True}}) == []


def test_an_update_under_a_subscribed_uri_is_covered_a_sibling_is_not() -> None:
    assert subscriptions.covers(["file:///data"], "file:///data")
    assert subscriptions.covers(["file:///data"], "file:///data/t")
    assert subscriptions.covers(["file:///data/"], "file:///data/t")
    assert not subscriptions.covers(["file:///data"], "file:///database")
    assert not subscriptions.covers(["file:///data"], None)


def test_tagging_keeps_other_meta_and_the_ids_type() -> None:
    tagged = subscriptions.tagged("notifications/resources/updated", {"uri": "u", "_meta": {"k": 1}}, "7")
    assert tagged["params"] == {"uri": "u", "_meta": {"k": 1, SUB: "7"}}
    retagged = subscriptions.retag(tagged, 7)
    assert retagged["params"]["_meta"] == {"k": 1, SUB: 7}
    plain = {"jsonrpc": "2.0", "method": "m"}
    assert subscriptions.retag(plain, 7) is plain
    assert subscriptions.retag_result({"resultType": "complete", "_meta": {SUB: 3}}, "x")["_meta"] == {SUB: "x"}


def test_log_levels_compare_by_severity() -> None:
    assert loglevels.at_least("error", "warning")
    assert loglevels.at_least("warning", "warning")
    assert not loglevels.at_least("info", "warning")
    assert not loglevels.at_least("loud", "debug")
    assert not loglevels.is_level("loud")


def test_a_tagged_notification_goes_to_the_listen_with_that_child_id() -> None:
    correlator: Correlator[str] = Correlator()
    listen, _ = correlator.outgoing("subscriptions/listen", {"notifications": {}}, "listen")
    call, _ = correlator.outgoing("tools/call", {"name": "x"}, "call")
    # Open listens do not count for attribution: the call is the one request in flight.
    sole = correlator.sole()
    assert sole is not None
    assert sole.owner == "call"
    note = Notification("notifications/tools/list_changed", {"_meta": {SUB: listen.id}})
    routed = correlator.incoming(note)
    assert isinstance(routed, ProgressFor)
    assert routed.pending.owner == "listen"
    assert isinstance(correlator.incoming(Notification(note.method, {"_meta": {SUB: call.id}})), Late)
    assert isinstance(correlator.incoming(Notification(note.method, {"_meta": {SUB: 999}})), Late)
    assert isinstance(correlator.incoming(Notification(note.method)), Unsolicited)


def test_a_legacy_sessions_listen_names_its_uris_and_reads_back_what_the_child_took() -> None:
    assert subscriptions.session_listen_params(["file:///a", "file:///b"]) == {
        "notifications": {"resourceSubscriptions": ["file:///a", "file:///b"]}
    }
    ack = {"notifications": {"resourceSubscriptions": ["file:///a", 7]}, "_meta": {SUB: 3}}
    assert subscriptions.acknowledged_uris(ack) == ["file:///a"]
    assert subscriptions.acknowledged_uris({"notifications": {}}) == []
    assert subscriptions.acknowledged_uris(None) == []


def test_a_legacy_session_gets_an_update_without_the_listens_subscription_id() -> None:
    tagged = {"uri": "file:///a", "_meta": {SUB: 3}}
    assert subscriptions.untagged(subscriptions.RESOURCES_UPDATED, tagged) == {
        "jsonrpc": "2.0",
        "method": subscriptions.RESOURCES_UPDATED,
        "params": {"uri": "file:///a"},
    }
    kept = {"uri": "file:///a", "_meta": {SUB: 3, "trace": "x"}}
    assert subscriptions.untagged(subscriptions.RESOURCES_UPDATED, kept)["params"] == {
        "uri": "file:///a",
        "_meta": {"trace": "x"},
    }


def test_a_child_ending_a_listen_with_cancelled_ends_it_as_the_graceful_result() -> None:
    correlator: Correlator[str] = Correlator()
    listen, _ = correlator.outgoing("subscriptions/listen", {"notifications": {}}, "listen")
    call, _ = correlator.outgoing("tools/call", {"name": "t"}, "call")
    routed = correlator.incoming(Notification("notifications/cancelled", {"requestId": listen.id, "reason": "bye"}))
    assert isinstance(routed, ReplyFor)
    assert routed.pending.owner == "listen"
    assert routed.reply == Result(listen.id, {"resultType": "complete", "_meta": {SUB: listen.id}})
    assert not correlator.is_pending(listen.id)
    # Only a listen ends so: a cancellation naming anything else is the caller's to judge.
    assert isinstance(correlator.incoming(Notification("notifications/cancelled", {"requestId": call.id})), Unsolicited)
    assert correlator.is_pending(call.id)
    assert isinstance(correlator.incoming(Notification("notifications/cancelled", {"requestId": "x"})), Unsolicited)
