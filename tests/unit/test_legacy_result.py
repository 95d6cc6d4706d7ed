"""A modern child's result as a legacy client gets it (``bridge.legacy_result``)."""

from __future__ import annotations

from gateway.protocol import bridge


def test_a_modern_result_loses_its_modern_only_keys_in_order_and_the_childs_result_is_untouched() -> None:
    result = {"content": [{"type": "text", "text": "hi"}], "resultType": "complete", "isError": False, "ttlMs": 5}
    legacy = bridge.legacy_result(result)
    assert list(legacy.items()) == [("content", [{"type": "text", "text": "hi"}]), ("isError", False)]
    assert result["resultType"] == "complete"  # a copy was changed, not the child's result
    assert result["ttlMs"] == 5


def test_reserved_meta_keys_are_dropped_and_an_emptied_meta_with_them() -> None:
    reserved = f"{bridge.RESERVED_META_PREFIX}protocolVersion"
    kept = bridge.legacy_result({"resultType": "complete", "_meta": {reserved: "x", "mine": 1}})
    assert kept == {"_meta": {"mine": 1}}
    emptied = bridge.legacy_result({"resultType": "complete", "cacheScope": "private", "_meta": {reserved: "x"}})
    assert emptied == {}
