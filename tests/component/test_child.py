"""One child over the fake backend, below the pool: ``open_child(spec, backend=...)`` runs the
handshake, the exchanges and the stop ladder over a ``ChildProcess`` that is no OS process."""

from __future__ import annotations

import dataclasses
import signal

import anyio
import pytest

from gateway.errors import ChildExitedError, ChildStartError
from gateway.protocol.jsonrpc import Result
from gateway.protocol.versions import Era
from gateway.stdio.child import StdioChild
from gateway.stdio.launch import open_child
from tests.component.fakechild import Era as FakeEra
from tests.component.fakechild import Script, fake_backend
from tests.component.harness import FAKE_SPEC

pytestmark = pytest.mark.anyio

BOUND = 10.0
SHORT = dataclasses.replace(
    FAKE_SPEC, probe_timeout=0.2, handshake_timeout=0.2, stdin_close_grace=0.2, sigterm_grace=0.2
)


@pytest.mark.parametrize(("era", "handshake"), [("modern", "server/discover"), ("legacy", "initialize")])
async def test_the_era_probe_finds_the_childs_era(era: FakeEra, handshake: str) -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend(Script(era=era)) as backend, open_child(FAKE_SPEC, backend=backend) as child:
            assert child.info is not None
            assert child.info.era is (Era.MODERN if era == "modern" else Era.LEGACY)
            assert child.pid == backend.children[0].pid
    [fake] = backend.children
    assert fake.era_of_handshake == handshake
    assert fake.returncode == 0  # stopped at stdin close


async def test_a_child_that_never_answers_fails_to_start_with_a_clear_error() -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend(Script(silent=True)) as backend:
            with pytest.raises(ChildStartError) as failed:
                async with open_child(SHORT, backend=backend):
                    pass  # pragma: no cover - never ready
    assert "no answer to initialize within 0.2 s" in failed.value.message
    [fake] = backend.children
    assert [m["method"] for m in fake.received] == ["server/discover", "initialize"]  # probe, then legacy


async def test_a_child_that_dies_mid_call_fails_the_call_with_its_exit_code_and_stderr() -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend(Script(era="legacy")) as backend, open_child(FAKE_SPEC, backend=backend) as child:
            params = {"name": "crash", "arguments": {"code": 7, "stderr": ["one", "two"]}}
            with pytest.raises(ChildExitedError) as died:
                await child.request("tools/call", params)
            assert not child.is_alive()
    assert died.value.data == {"exit_code": 7}
    assert died.value.private["stderr"] == ["one", "two"]
    assert f"(pid {backend.children[0].pid}) exited with code 7; stderr: one | two" in died.value.detailed
    assert "one" not in died.value.message  # a client's reading (gateway.errors)


@pytest.mark.parametrize(
    ("script", "returncode"),
    [
        (Script(ignore_stdin_close=True), -signal.SIGTERM),
        (Script(ignore_stdin_close=True, ignore_terminate=True), -signal.SIGKILL),
    ],
)
async def test_the_stop_ladder_terminates_then_kills_a_child_that_will_not_exit(
    script: Script, returncode: int
) -> None:
    with anyio.fail_after(BOUND):
        async with fake_backend(script) as backend, open_child(SHORT, backend=backend) as child:
            assert isinstance(await child.request("ping", None), Result)  # serving until stopped
    [fake] = backend.children
    assert fake.returncode == returncode


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_requests_one_loop_turn_starts_beside_another_reach_the_child_in_one_write(era: FakeEra) -> None:
    """Alone on the child, a request's line is written at once; beside others in flight, the
    lines of the requests one turn of the loop starts are written together (one system call
    and one wake-up of the child for all), in order, and each gets its own answer."""
    replies: dict[int, object] = {}

    async def call(child: StdioChild, i: int) -> None:
        reply = await child.request("tools/call", {"name": "echo", "arguments": {"message": f"m{i}"}})
        replies[i] = reply.result["content"] if isinstance(reply, Result) else reply

    with anyio.fail_after(BOUND):
        async with fake_backend(Script(era=era)) as backend, open_child(FAKE_SPEC, backend=backend) as child:
            [fake] = backend.children
            if era == "modern":  # the gateway's listen for its list changes is written first, alone
                await backend.changes.until(lambda: len(fake.listens) == 1)
            async with child.exchange("tools/call", {"name": "hold", "arguments": {}}):
                await backend.changes.until(lambda: len(fake.calls) == 1)
                before = len(fake.reads)
                async with anyio.create_task_group() as tg:
                    for i in range(5):
                        tg.start_soon(call, child, i)
                assert fake.reads[before:] == [5]
                fake.calls[0].release()
    assert replies == {i: [{"type": "text", "text": f"m{i}"}] for i in range(5)}
    echoed = [m["params"]["arguments"]["message"] for m in fake.received if m.get("params", {}).get("name") == "echo"]
    assert echoed == [f"m{i}" for i in range(5)]


async def test_a_request_that_ends_in_the_turn_that_queued_it_is_never_written_nor_cancelled() -> None:
    """Beside a request in flight, a request's line waits for the end of the loop turn; one
    whose caller leaves before then takes its line back: the child never sees it, so it is
    sent no cancel, and the requests around it go out and are answered as usual."""
    with anyio.fail_after(BOUND):
        async with fake_backend(Script(era="modern")) as backend, open_child(FAKE_SPEC, backend=backend) as child:
            [fake] = backend.children
            async with child.exchange("tools/call", {"name": "hold", "arguments": {}}):
                await backend.changes.until(lambda: len(fake.calls) == 1)
                async with child.exchange("tools/call", {"name": "echo", "arguments": {"message": "gone"}}):
                    pass  # left at once, in the turn that queued its line
                reply = await child.request("tools/call", {"name": "echo", "arguments": {"message": "kept"}})
                assert isinstance(reply, Result)
                assert reply.result["content"] == [{"type": "text", "text": "kept"}]
                # Everything written before "kept" was read before it: the child has seen it all.
                tools = [m["params"] for m in fake.received if m.get("method") == "tools/call"]
                assert [t["arguments"].get("message") for t in tools] == [None, "kept"]  # "gone" never written
                assert fake.cancels() == []  # and no cancel for it
