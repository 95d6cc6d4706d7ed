"""The keyring in force (``gateway.relay.statekeys``): ``--state-secret-file`` re-read when it
changes and swapped whole; a file that does not read keeps the ring (issue #40)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import anyio
import pytest

from gateway.http.auth import TokenStore
from gateway.http.operator import COOKIE_NAME, OperatorAccess
from gateway.protocol.keyring import MAX_STATE_KEYS, fingerprint
from gateway.relay.owner import OwnerRouting
from gateway.relay.statekeys import StateKeys
from tests.logrecords import recording

pytestmark = pytest.mark.anyio

OLD = b"the old key, 16 bytes or more"
NEW = b"the new key, 16 bytes or more"
WAIT = 10.0


def replace(path: Path, *lines: bytes) -> None:
    """Write ``path`` as Kubernetes updates a mounted Secret: a new file moved over the old one."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_bytes(b"".join(line + b"\n" for line in lines))
    os.replace(fresh, path)


def settle(keys: StateKeys) -> bool:
    """Two looks at the file, as the watcher makes a second apart: the first only sees the change."""
    assert keys.reload_if_changed() is False
    return keys.reload_if_changed()


async def test_a_changed_file_swaps_the_ring_and_a_reader_keeps_the_ring_it_took(tmp_path: Path) -> None:
    path = tmp_path / "state-secret"
    replace(path, OLD)
    keys = StateKeys.load(str(path))
    taken = keys.ring
    with recording("gateway.keys") as records:
        assert keys.reload_if_changed() is False  # unchanged: a stat, nothing read
        replace(path, OLD, NEW)
        assert settle(keys) is True
    assert keys.ring.keys == (OLD, NEW)
    assert taken.keys == (OLD,)  # one token is signed or checked with one ring
    assert keys.reloads == 1
    [line] = records.matching(lambda r: getattr(r, "event", None) == "state_keys")
    assert line.levelno == logging.INFO
    assert line.getMessage() == (
        f"state keys reloaded from {path}: current {fingerprint(OLD)}, previous {fingerprint(NEW)}"
    )
    assert OLD.decode() not in line.getMessage()
    assert NEW.decode() not in line.getMessage()
    assert keys.describe() == {
        "current": fingerprint(OLD),
        "previous": [fingerprint(NEW)],
        "file": str(path),
        "reloads": 1,
        "problem": None,
    }


async def test_a_bad_or_unreadable_file_keeps_the_ring_in_force_and_says_so_once(tmp_path: Path) -> None:
    path = tmp_path / "state-secret"
    replace(path, OLD)
    keys = StateKeys.load(str(path))
    bad = [bytes([65 + n]) * 16 for n in range(MAX_STATE_KEYS + 1)]
    with recording("gateway.keys") as records:
        replace(path, *bad)
        assert settle(keys) is False
        assert keys.reload_if_changed() is False  # the same bad file: said once
        assert keys.ring.keys == (OLD,)
        assert keys.problem is not None
        assert keys.problem.startswith(f"holds {MAX_STATE_KEYS + 1} keys; at most {MAX_STATE_KEYS}")
        path.unlink()
        assert settle(keys) is False
        assert keys.reload_if_changed() is False
        assert keys.problem is not None
        assert keys.problem.startswith("cannot read it")
        assert keys.ring.keys == (OLD,)
        replace(path, NEW, OLD)
        assert settle(keys) is True
    assert keys.ring.keys == (NEW, OLD)
    assert keys.problem is None
    errors = records.errors()
    assert len(errors) == 2, errors
    assert "keeping the keys in force" in errors[0]
    assert "holds 5 keys" in errors[0]
    assert "cannot read it" in errors[1]


async def test_a_new_current_key_no_replica_was_given_before_is_warned_about(tmp_path: Path) -> None:
    path = tmp_path / "state-secret"
    replace(path, OLD)
    keys = StateKeys.load(str(path))
    with recording("gateway.keys") as records:
        replace(path, NEW, OLD)  # step 1 skipped: the new key went first at once
        assert settle(keys) is True
        replace(path, OLD, NEW)  # back: the current key was in force before, so no warning
        assert settle(keys) is True
    [warning] = records.matching(lambda r: r.levelno == logging.WARNING)
    assert f"current key {fingerprint(NEW)} was not among the keys in force before" in warning.getMessage()


async def test_a_kubernetes_secret_volume_swap_is_seen(tmp_path: Path) -> None:
    # The kubelet writes a new timestamped directory and swaps the ..data symlink to it.
    first, second = tmp_path / "..2026_01_01", tmp_path / "..2026_01_02"
    first.mkdir()
    second.mkdir()
    (first / "state-secret").write_bytes(OLD + b"\n")
    (second / "state-secret").write_bytes(OLD + b"\n" + NEW + b"\n")
    (tmp_path / "..data").symlink_to(first.name)
    (tmp_path / "state-secret").symlink_to("..data/state-secret")
    keys = StateKeys.load(str(tmp_path / "state-secret"))
    swap = tmp_path / "..data_tmp"
    swap.symlink_to(second.name)
    os.replace(swap, tmp_path / "..data")
    assert settle(keys) is True
    assert keys.ring.keys == (OLD, NEW)


async def test_a_file_written_in_place_is_read_once_it_stopped_changing(tmp_path: Path) -> None:
    path = tmp_path / "state-secret"
    path.write_bytes(OLD + b"\n")
    keys = StateKeys.load(str(path))
    with recording("gateway.keys") as records, path.open("r+b") as fh:
        fh.truncate(0)  # a shell's `>`: truncated first...
        assert keys.reload_if_changed() is False  # ...seen...
        fh.write(OLD + b"\n" + NEW + b"\n")  # ...then written, before the next look
        fh.flush()
        assert keys.reload_if_changed() is False  # changed again: not settled yet
        assert keys.reload_if_changed() is True
    assert keys.ring.keys == (OLD, NEW)
    assert records.errors() == []  # the empty file was never read


async def test_watching_reloads_the_file_on_its_own_and_tells_who_waits(tmp_path: Path) -> None:
    path = tmp_path / "state-secret"
    replace(path, OLD)
    keys = StateKeys.load(str(path), check_interval=0.01)
    with anyio.fail_after(WAIT):
        async with keys.watching():
            changed = keys.next_change()
            replace(path, OLD, NEW)
            await changed.wait()
            assert keys.ring.keys == (OLD, NEW)
            changed = keys.next_change()
            replace(path, b"short")
            await changed.wait()  # refused: the ring stays
            assert keys.ring.keys == (OLD, NEW)
            assert keys.problem is not None


async def test_no_file_means_one_random_key_of_the_process_never_reloaded() -> None:
    one, two = StateKeys.random(), StateKeys.random()
    assert one.ring.current != two.ring.current
    assert not one.shared
    assert one.reload_if_changed() is False
    async with one.watching():
        pass
    assert one.describe()["file"] is None


async def test_the_owner_routing_signs_with_the_current_key_and_opens_what_a_previous_key_sealed() -> None:
    old = OwnerRouting("http://10.0.0.7:8000", StateKeys.fixed(OLD), max_body_bytes=1024)
    both = OwnerRouting("http://10.0.0.8:8000", StateKeys.fixed(NEW, OLD), max_body_bytes=1024)
    assert both.session_owner(old.mint_session_id()) == old.me
    assert both.forward_key() == both.keys.ring.derived("forward")[0]
    from gateway.protocol import requeststate
    from gateway.protocol.requeststate import StateClaims

    ring = old.keys.ring
    token = requeststate.encode_state(
        StateClaims("sid", "alice", "files", "tools/call", "d" * 64, 2e9, owner=old.sealed_me(ring)), ring.current
    )
    assert both.state_owner(token, now=1e9) == old.me
    newer = OwnerRouting("http://10.0.0.9:8000", StateKeys.fixed(NEW), max_body_bytes=1024)
    with pytest.raises(requeststate.StateError):
        newer.state_owner(token, now=1e9)


async def test_an_operator_cookie_outlives_a_rotation_until_its_key_is_removed() -> None:
    token = "operator-token-0123456789abcdef"
    now = 1_800_000_000.0

    def access(*keys: bytes) -> OperatorAccess:
        tokens = TokenStore([token], flag="--operator-token")
        return OperatorAccess(tokens, keys=StateKeys.fixed(*keys), clients_authenticate=True, clock=lambda: now)

    cookie = access(OLD).mint_cookie(token.encode(), now)
    jar = {b"cookie": f"{COOKIE_NAME}={cookie}".encode()}
    scope = {"type": "http", "path": "/status", "method": "GET", "client": ("10.0.0.5", 1), "headers": []}
    assert await access(NEW, OLD).refusal(scope, jar) is None
    refused = await access(NEW).refusal(scope, jar)
    assert refused is not None
    assert refused.status_code == 401
