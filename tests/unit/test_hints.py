"""Start-failure hints: plain words on what to try."""

from gateway.stdio import hints


def test_a_banner_on_stdout_is_named() -> None:
    hint = hints.start_failure("python", timed_out=False, exit_code=1, stdout_noise=["Server listening on stdio"])
    assert hint is not None
    assert "Server listening on stdio" in hint
    assert "only JSON-RPC" in hint


def test_a_silent_npx_suggests_a_longer_startup_timeout() -> None:
    hint = hints.start_failure("/usr/bin/npx", timed_out=True)
    assert hint is not None
    assert "--startup-timeout" in hint


def test_a_silent_binary_is_asked_whether_it_speaks_stdio() -> None:
    assert "stdio" in (hints.start_failure("my-server", timed_out=True) or "")


def test_exit_127_and_missing_modules_are_explained() -> None:
    assert "127" in (hints.start_failure("node", timed_out=False, exit_code=127) or "")
    node = hints.start_failure("node", timed_out=False, exit_code=1, stderr_tail=["Error: Cannot find module 'x'"])
    assert "module" in (node or "")


def test_nothing_is_said_when_nothing_is_known() -> None:
    assert hints.start_failure("server", timed_out=False, exit_code=2) is None


def test_a_missing_npx_mentions_nodejs() -> None:
    assert "Node.js" in hints.missing_program("npx")
    assert "uv" in hints.missing_program("uvx")


def test_npx_without_y_is_told_to_pass_y() -> None:
    tail = ['npm error npx canceled due to missing packages and no YES option: ["x@1.0.0"]']
    hint = hints.start_failure("npx", timed_out=False, exit_code=1, stderr_tail=tail)
    assert hint is not None
    assert "npx -y PACKAGE" in hint
