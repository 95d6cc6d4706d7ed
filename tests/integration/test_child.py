"""The stdio child transport against real subprocesses (tests/servers/testserver.py)."""

from __future__ import annotations

import logging
import os
import signal
import stat
import sys
from pathlib import Path

import anyio
import pytest

from gateway.errors import ChildExitedError, ChildProtocolError, ChildStartError, ChildTimeoutError
from gateway.protocol.jsonrpc import ErrorReply, Notification, Request, Result
from gateway.protocol.versions import Era
from gateway.stdio.ask import ChildAsk
from gateway.stdio.child import StdioChild
from gateway.stdio.launch import open_child
from gateway.stdio.spec import INITIALIZE_FIRST, ChildSpec
from tests.conftest import call_params, server_spec
from tests.logrecords import recording

pytestmark = pytest.mark.anyio


async def call(child: StdioChild, name: str, arguments: dict[str, object] | None = None, **kw: object) -> Result:
    assert child.info is not None
    reply = await child.request("tools/call", call_params(child.info.era is Era.MODERN, name, arguments), **kw)  # type: ignore[arg-type]
    assert isinstance(reply, Result), reply
    return reply


def text_of(result: Result) -> str:
    return str(result.result["content"][0]["text"])


def process_state(pid: int) -> str | None:
    """The /proc state letter of pid, or None if no such process exists."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return None
    return data[data.rfind(b")") + 2 :].split()[0].decode()


# -- spawning ---------------------------------------------------------------------------


async def test_arguments_reach_the_child_verbatim_without_a_shell() -> None:
    literal = "$HOME `id` ; exit 1 | cat"
    with anyio.fail_after(10):
        async with open_child(server_spec("--banner", literal)) as child:
            await call(child, "echo", {"message": "x"})
            assert list(child.stdout_noise) == [literal]


@pytest.mark.parametrize(
    ("spec", "what"),
    [
        (ChildSpec(sys.executable, ("a\x00b",)), "argument 1 contains a NUL byte"),
        (ChildSpec("py\x00thon"), "the command contains a NUL byte"),
        (ChildSpec(sys.executable, env={"X": "a\x00"}), "environment variable X contains a NUL byte"),
        (ChildSpec(sys.executable, env={"A=B": "1"}), "environment name 'A=B'"),
    ],
)
async def test_a_nul_byte_or_bad_env_name_is_refused_before_spawning(spec: ChildSpec, what: str) -> None:
    with pytest.raises(ChildStartError, match=r"^cannot start") as info:
        async with open_child(spec):
            pass  # pragma: no cover - must not be reached
    assert what in info.value.detailed


async def test_environment_is_inherited_overlaid_and_keys_set_to_none_are_removed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GW_KEEP", "kept")
    monkeypatch.setenv("GW_DROP", "dropped")
    spec = server_spec(env={"GW_NEW": "new", "GW_DROP": None})
    with anyio.fail_after(10):
        async with open_child(spec) as child:
            result = await call(child, "env", {"names": ["GW_KEEP", "GW_DROP", "GW_NEW"]})
    assert result.result["structuredContent"]["env"] == {"GW_KEEP": "kept", "GW_DROP": None, "GW_NEW": "new"}


async def test_the_gateways_own_settings_are_never_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_GATEWAY_AUTH_TOKEN", "secret-token-0123456789")
    with anyio.fail_after(10):
        async with open_child(server_spec()) as child:
            result = await call(child, "env", {"names": ["MCP_GATEWAY_AUTH_TOKEN"]})
    assert result.result["structuredContent"]["env"] == {"MCP_GATEWAY_AUTH_TOKEN": None}


async def test_inherit_env_false_gives_the_child_exactly_the_configured_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GW_KEEP", "kept")
    spec = server_spec(env={"GW_ONLY": "1"}, inherit_env=False)
    with anyio.fail_after(10):
        async with open_child(spec) as child:
            result = await call(child, "env", {"names": ["GW_KEEP", "GW_ONLY", "PATH", "HOME"]})
    assert result.result["structuredContent"]["env"] == {"GW_KEEP": None, "GW_ONLY": "1", "PATH": None, "HOME": None}


async def test_the_child_runs_in_the_configured_working_directory(tmp_path: Path) -> None:
    with anyio.fail_after(10):
        async with open_child(server_spec(cwd=str(tmp_path))) as child:
            assert text_of(await call(child, "cwd")) == str(tmp_path)


async def test_the_child_leads_its_own_session_and_process_group() -> None:
    with anyio.fail_after(10):
        async with open_child(server_spec()) as child:
            assert os.getpgid(child.pid) == child.pid
            assert os.getsid(child.pid) == child.pid
            assert os.getpgid(child.pid) != os.getpgid(0)


async def test_a_grandchild_is_stopped_with_the_child() -> None:
    with anyio.fail_after(15):
        async with open_child(server_spec()) as child:
            grandchild = int(text_of(await call(child, "fork_grandchild")))
            assert process_state(grandchild) not in (None, "Z")
            pid = child.pid
    assert process_state(grandchild) is None, "grandchild left running or unreaped"
    assert process_state(pid) is None, "child not reaped"


async def test_a_grandchild_left_behind_by_a_dead_child_is_stopped_too() -> None:
    with anyio.fail_after(15):
        async with open_child(server_spec()) as child:
            grandchild = int(text_of(await call(child, "fork_grandchild")))
            with pytest.raises(ChildExitedError):
                await call(child, "exit", {"code": 0})
    assert process_state(grandchild) is None


@pytest.mark.parametrize(
    ("make_spec", "reason"),
    [
        (lambda tmp: ChildSpec(str(tmp / "missing-program")), "No such file or directory"),
        (lambda tmp: ChildSpec(str(tmp / "not-executable")), "Permission denied"),
        (lambda tmp: ChildSpec(sys.executable, cwd=str(tmp / "no-such-dir")), "working directory"),
    ],
)
async def test_a_command_that_cannot_start_fails_at_once_with_the_reason(tmp_path: Path, make_spec, reason) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    script.chmod(stat.S_IRUSR | stat.S_IWUSR)
    spec = make_spec(tmp_path)
    with anyio.fail_after(5), pytest.raises(ChildStartError) as info:
        async with open_child(spec):
            pass  # pragma: no cover
    assert info.value.detailed.startswith(f"cannot start {spec.command}: ")
    assert reason in info.value.detailed


async def test_a_child_that_exits_at_start_fails_with_its_exit_code_and_stderr() -> None:
    with anyio.fail_after(10), pytest.raises(ChildStartError) as info:
        async with open_child(server_spec("--exit-at-start", "2")):
            pass  # pragma: no cover
    assert "exited with code 2" in info.value.message
    assert "fatal: configured to exit" in info.value.detailed
    assert info.value.data["exit_code"] == 2


# -- stdout and stderr ------------------------------------------------------------------


async def test_a_non_json_line_on_stdout_is_dropped_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with anyio.fail_after(10):
        async with open_child(server_spec()) as child:
            await call(child, "noise", {"text": "Server listening on stdio"})
            assert text_of(await call(child, "echo", {"message": "still fine"})) == "still fine"
            assert child.non_json_lines == 1
    assert any("non-JSON line" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


async def test_an_over_long_reply_fails_only_its_request_and_the_child_stays_usable() -> None:
    with anyio.fail_after(10):
        async with open_child(server_spec(max_line_bytes=4096)) as child:
            with pytest.raises(ChildProtocolError, match="over the gateway's line limit of 4096 bytes"):
                await call(child, "big", {"bytes": 100_000})
            assert child.oversized_lines == 1
            assert text_of(await call(child, "echo", {"message": "after"})) == "after"


async def test_stderr_is_drained_and_its_last_lines_are_kept_cut_to_the_bound() -> None:
    lines = [f"line {i} " + "y" * 600 for i in range(3000)]  # ~1.8 MB: far more than a pipe holds
    with anyio.fail_after(20):
        async with open_child(server_spec()) as child:
            await call(child, "stderr", {"lines": lines})
            await call(child, "stderr", {"lines": ["", "last words"]})
        # Read once the child has stopped and its stderr was drained to its end: a reply on
        # stdout says nothing of how far the gateway has read the other pipe.
        tail = child.stderr_tail
    assert len(tail) == 20
    assert tail[-1] == "last words"
    assert tail[-2].startswith("line 2999 ")
    assert all(len(line) <= 500 for line in tail)


async def test_a_real_childs_stderr_flood_is_logged_up_to_its_bound_and_the_rest_is_counted() -> None:
    lines = [f"line {i} " + "y" * 600 for i in range(3000)]
    with anyio.fail_after(30), recording("gateway.child.stderr") as records:
        async with open_child(server_spec(), server="srv", pool="srv principal=bob") as child:
            await call(child, "stderr", {"lines": lines})
            await call(child, "stderr", {"lines": ["", "last words"]})
    # Read once the child has stopped: its stderr was drained to its end, the last count given.
    logged = [r for r in records.records if getattr(r, "event", None) == "stderr"]
    counts = [r.dropped for r in records.records if getattr(r, "event", None) == "stderr_dropped"]  # type: ignore[attr-defined]
    assert len(logged) + sum(counts) == len(lines) + 1  # every non-empty line: logged or counted
    assert counts  # 3,000 lines through a pipe come far faster than 10 a second
    assert logged[0].line == lines[0][:500]  # type: ignore[attr-defined]
    assert {(r.server, r.pool, r.pid) for r in logged} == {("srv", "srv principal=bob", child.pid)}  # type: ignore[attr-defined]


# -- failures in flight -----------------------------------------------------------------


async def test_a_child_that_exits_fails_every_request_in_flight_with_code_and_stderr() -> None:
    errors: list[BaseException] = []
    with anyio.fail_after(15):
        async with open_child(server_spec()) as child:

            async def sleeper() -> None:
                try:
                    await call(child, "sleep", {"ms": 60_000})
                except ChildExitedError as exc:
                    errors.append(exc)

            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(sleeper)
                with pytest.raises(ChildExitedError) as info:
                    await call(child, "exit", {"code": 3, "stderr": "boom: disk on fire"})
    assert len(errors) == 3
    for exc in [*errors, info.value]:
        assert isinstance(exc, ChildExitedError)
        assert "exited with code 3" in exc.message
        assert "boom: disk on fire" in exc.detailed
        assert exc.data["exit_code"] == 3


async def test_a_child_killed_by_a_signal_names_the_signal() -> None:
    with anyio.fail_after(15):
        async with open_child(server_spec()) as child:
            with pytest.raises(ChildExitedError, match="killed by SIGKILL") as info:
                await call(child, "kill_self", {"signal": int(signal.SIGKILL)})
            assert info.value.data["signal"] == "SIGKILL"
            with pytest.raises(ChildExitedError):  # later requests fail at once too
                await call(child, "echo", {"message": "x"})


async def test_a_timed_out_request_is_cancelled_at_the_child_which_stays_usable() -> None:
    with anyio.fail_after(15):
        async with open_child(server_spec()) as child:
            with pytest.raises(ChildTimeoutError, match=r"within 0\.2 s"):
                async with child.exchange("tools/call", call_params(True, "sleep", {"ms": 30_000}), timeout=0.2) as ex:
                    timed_out_id = ex.child_id
                    async for _ in ex:
                        pass
            ids = (await call(child, "cancelled_ids")).result["structuredContent"]["ids"]
            assert ids == [timed_out_id]
            assert text_of(await call(child, "echo", {"message": "alive"})) == "alive"


async def test_a_late_reply_after_a_timeout_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="gateway.child")
    with anyio.fail_after(15), recording("gateway.child") as records:
        async with open_child(server_spec()) as child:
            with pytest.raises(ChildTimeoutError):
                await call(child, "late_reply", {"ms": 5000}, timeout=0.2)
            # The test server replies right after it sees the cancellation: the gateway drops it.
            await records.wait_for_text("late message")
            assert child.reading(0).in_flight == 0  # (in flight: the gateway's own listen, which is no work)


async def test_json_rpc_errors_from_the_child_keep_code_message_and_data() -> None:
    with anyio.fail_after(10):
        async with open_child(server_spec()) as child:
            reply = await child.request("tools/call", call_params(True, "error_reply"))
    assert isinstance(reply, ErrorReply)
    assert reply.error == {"code": 1234, "message": "custom failure", "data": {"detail": [1, 2]}}


async def test_a_malformed_error_still_ends_the_request_with_a_clear_error() -> None:
    with anyio.fail_after(10):
        async with open_child(server_spec()) as child:
            with pytest.raises(ChildProtocolError, match="malformed error object"):
                await call(child, "malformed_error")
            assert text_of(await call(child, "echo", {"message": "ok"})) == "ok"


# -- messages from the child ------------------------------------------------------------


async def test_a_ping_from_the_child_is_answered_with_an_empty_result() -> None:
    with anyio.fail_after(10):
        async with open_child(server_spec()) as child:
            assert text_of(await call(child, "ping_client")) == "pong: {}"


async def test_other_child_requests_reach_the_handler() -> None:
    seen: list[Request] = []

    async def handler(request: Request) -> Result:
        seen.append(request)
        return Result(request.id, {"roots": []})

    with anyio.fail_after(10):
        async with open_child(server_spec(), on_request=handler) as child:
            assert text_of(await call(child, "ping_client")).startswith("pong: ")
    assert [r.method for r in seen] == ["ping"]


ROOTS_ASK = {"requests": [{"method": "roots/list"}]}


async def test_a_question_from_the_child_reaches_the_one_exchange_in_flight_that_takes_asks() -> None:
    with anyio.fail_after(10):
        async with open_child(server_spec("--era", "legacy")) as child:
            params = call_params(False, "ask_client", ROOTS_ASK)
            async with child.exchange("tools/call", params, asks=True) as ex:
                async for item in ex:
                    assert isinstance(item, ChildAsk)
                    assert (item.method, item.params) == ("roots/list", None)
                    assert child.awaiting_input == 1
                    assert item.answer_result({"roots": [{"uri": "file:///x"}]})
                    assert not item.answer_result({"roots": []})  # the first answer wins
                reply = ex.reply()
    assert isinstance(reply, Result)
    assert reply.result["structuredContent"]["answers"] == [{"result": {"roots": [{"uri": "file:///x"}]}}]


async def test_without_a_single_exchange_that_takes_asks_the_gateway_answers_the_child_itself() -> None:
    roots = ({"uri": "file:///configured"},)
    with anyio.fail_after(10):
        async with open_child(server_spec("--era", "legacy", roots=roots)) as child:
            # The exchange does not take asks (asks=False, like the gateway's own requests).
            answered = await call(child, "ask_client", ROOTS_ASK)
    assert answered.result["structuredContent"]["answers"] == [{"result": {"roots": list(roots)}}]


async def test_unsolicited_notifications_reach_the_handler_as_they_are_read() -> None:
    seen: list[Notification] = []
    with anyio.fail_after(10):
        async with open_child(server_spec(), on_notification=seen.append) as child:
            await call(child, "notify", {"method": "notifications/tools/list_changed"})
            # Written before the reply, so read (and handled) before the call returned.
            assert [n.method for n in seen] == ["notifications/tools/list_changed"]


async def test_progress_reaches_the_exchange_with_the_clients_token_restored() -> None:
    with anyio.fail_after(10):
        async with open_child(server_spec()) as child:
            params = call_params(True, "progress_burst", {"count": 3, "tag": "t"}, progressToken="client-token")
            async with child.exchange("tools/call", params) as ex:
                notes = [n async for n in ex]
                reply = ex.reply()
    assert isinstance(reply, Result)
    assert [n.params["progressToken"] for n in notes if n.params] == ["client-token"] * 3


# -- shutdown ---------------------------------------------------------------------------


async def test_a_well_behaved_child_exits_when_stdin_closes() -> None:
    with anyio.fail_after(10):
        async with open_child(server_spec(stdin_close_grace=5.0)) as child:
            pid = child.pid
        error = child.death
    assert isinstance(error, ChildExitedError)
    assert error.data.get("exit_code") == 0
    assert process_state(pid) is None


async def test_a_child_that_ignores_stdin_close_gets_sigterm_after_the_grace() -> None:
    with anyio.fail_after(10):
        async with open_child(server_spec("--ignore-stdin-eof", stdin_close_grace=0.2)) as child:
            pid = child.pid
    assert child.death is not None
    assert child.death.data.get("signal") == "SIGTERM"
    assert process_state(pid) is None


async def test_a_child_that_ignores_sigterm_is_killed() -> None:
    spec = server_spec("--ignore-stdin-eof", "--ignore-sigterm", stdin_close_grace=0.2, sigterm_grace=0.2)
    with anyio.fail_after(10):
        async with open_child(spec) as child:
            pid = child.pid
    assert child.death is not None
    assert child.death.data.get("signal") == "SIGKILL"
    assert process_state(pid) is None


DEAF_CHILD = """
import json, os, sys, time
request = json.loads(sys.stdin.buffer.readline())
os.close(0)  # stops reading stdin for good, and lives on
result = {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "deaf", "version": "1"}}
print(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}), flush=True)
time.sleep(60)
"""


async def test_a_child_that_stops_reading_its_stdin_is_stopped_and_its_requests_fail() -> None:
    spec = ChildSpec(sys.executable, ("-c", DEAF_CHILD), handshake=INITIALIZE_FIRST, stdin_close_grace=0.2)
    with anyio.fail_after(15):
        async with open_child(spec) as child:
            with pytest.raises(ChildExitedError):
                await child.request("tools/call", {"name": "echo", "arguments": {}})
            await child.wait_exited()
            with pytest.raises(ChildExitedError):  # and later ones fail at once
                await child.request("ping", None)
    assert child.death is not None
    assert child.death.data.get("signal") == "SIGTERM"


async def test_stop_is_idempotent_and_safe_on_a_dead_child() -> None:
    with anyio.fail_after(10):
        async with open_child(server_spec()) as child:
            with pytest.raises(ChildExitedError):
                await call(child, "exit", {"code": 5})
            await child.stop()
            await child.stop()
    assert child.death is not None
    assert child.death.data.get("exit_code") == 5


# -- era probe and handshake ------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "era", "version"),
    [
        (("--era", "modern"), Era.MODERN, "2026-07-28"),
        (("--era", "dual"), Era.MODERN, "2026-07-28"),
        (("--era", "legacy"), Era.LEGACY, "2025-11-25"),
        (("--era", "legacy", "--silent-probe"), Era.LEGACY, "2025-11-25"),
    ],
)
async def test_the_probe_decides_the_era(flags: tuple[str, ...], era: Era, version: str) -> None:
    # A short probe budget only where the probe goes unanswered (so the test stays quick); a
    # child that answers gets a generous one, or a slow start on a busy machine would read as legacy.
    probe_timeout = 0.5 if "--silent-probe" in flags else 8
    with anyio.fail_after(20):
        async with open_child(server_spec(*flags, probe_timeout=probe_timeout)) as child:
            assert child.info is not None
            assert (child.info.era, child.info.version) == (era, version)
            assert child.info.server_info.get("name")
            assert text_of(await call(child, "echo", {"message": "hi"})) == "hi"


async def test_a_silent_child_fails_to_start_after_the_handshake_timeout() -> None:
    with anyio.fail_after(10), pytest.raises(ChildStartError, match=r"no answer to initialize within 0\.3 s"):
        async with open_child(server_spec("--silent", probe_timeout=0.3, handshake_timeout=0.3)):
            pass  # pragma: no cover


async def test_a_server_that_prints_a_banner_and_exits_gets_a_hint_about_stdout() -> None:
    code = "print('Server listening on stdio', flush=True); import sys; sys.exit(1)"
    with anyio.fail_after(10), pytest.raises(ChildStartError) as info:
        async with open_child(ChildSpec(sys.executable, ("-c", code), probe_timeout=5, handshake_timeout=5)):
            pass  # pragma: no cover
    assert "exited with code 1" in info.value.message
    assert "hint: this server printed 'Server listening on stdio' on stdout" in info.value.detailed


async def test_a_missing_program_gets_a_hint_about_path() -> None:
    with anyio.fail_after(10), pytest.raises(ChildStartError) as info:
        async with open_child(ChildSpec("no-such-mcp-server-binary")):
            pass  # pragma: no cover
    assert "on the gateway's PATH" in info.value.detailed
