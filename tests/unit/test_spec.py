"""What to run as a child: checks made before spawning, and the exact environment it gets."""

from __future__ import annotations

import pytest

from gateway.errors import CODE_CHILD_START, ChildStartError
from gateway.stdio.spec import ChildSpec, check_spec, child_environment

BASE = {"PATH": "/usr/bin", "HOME": "/home/me", "LANG": "C.UTF-8"}


def refusal(spec: ChildSpec) -> ChildStartError:
    with pytest.raises(ChildStartError) as caught:
        check_spec(spec)
    assert caught.value.message.startswith("cannot start")
    assert str(caught.value) == caught.value.detailed  # the log's reading
    return caught.value


# --- check_spec -------------------------------------------------------------------------


def test_a_plain_spec_passes_the_checks() -> None:
    spec = ChildSpec("npx", ("-y", "@scope/server", ""), env={"TOKEN": "a=b", "EMPTY": "", "GONE": None}, cwd="/tmp")

    check_spec(spec)


def test_an_empty_command_is_refused() -> None:
    error = refusal(ChildSpec(""))

    assert error.message == "cannot start (empty command): no command given"


def test_a_nul_byte_in_the_command_is_refused() -> None:
    error = refusal(ChildSpec("/bin/e\x00cho"))

    assert error.message == "cannot start e\x00cho: the command contains a NUL byte"


@pytest.mark.parametrize("index", [1, 2, 3])
def test_a_nul_byte_in_an_argument_is_refused_naming_the_argument(index: int) -> None:
    args = ["a", "b", "c"]
    args[index - 1] = "x\x00y"

    error = refusal(ChildSpec("server", tuple(args)))

    assert error.message == f"cannot start server: argument {index} contains a NUL byte"
    assert (error.data, error.private) == ({}, {"command": "server"})


def test_a_nul_byte_in_an_environment_value_is_refused_naming_the_variable() -> None:
    error = refusal(ChildSpec("server", env={"OK": "fine", "API_KEY": "se\x00cret"}))

    assert error.message == "cannot start server: an environment variable contains a NUL byte"
    assert error.detailed == "cannot start server: environment variable API_KEY contains a NUL byte"
    assert "cret" not in error.detailed  # the value itself is never echoed, even to the operator


@pytest.mark.parametrize("name", ["", "A=B", "=A", "A\x00B"], ids=["empty", "equals", "leading-equals", "nul"])
def test_a_malformed_environment_name_is_refused(name: str) -> None:
    error = refusal(ChildSpec("server", env={name: "value"}))

    assert error.message == "cannot start server: an environment name is empty or contains '=' or NUL"
    assert repr(name) in error.detailed


def test_a_malformed_environment_name_is_refused_even_when_it_would_remove_the_variable() -> None:
    refusal(ChildSpec("server", env={"A=B": None}))


def test_a_nul_byte_in_the_cwd_is_refused() -> None:
    error = refusal(ChildSpec("server", cwd="/tmp/a\x00b"))

    assert error.message == "cannot start server: cwd contains a NUL byte"


def test_the_refusal_is_a_child_start_error_on_the_wire() -> None:
    error = refusal(ChildSpec("server", ("\x00",)))

    wire = error.error_object()
    assert wire["code"] == CODE_CHILD_START
    assert wire["data"]["kind"] == "ChildStartError"
    assert "command" not in wire["data"]


def test_with_expose_child_errors_the_refusal_names_the_command_on_the_wire() -> None:
    error = refusal(ChildSpec("/opt/srv/server", env={"API_KEY": "se\x00cret"}, expose_errors=True))

    wire = error.error_object()
    assert wire["data"]["command"] == "/opt/srv/server"
    assert wire["message"] == "cannot start /opt/srv/server: environment variable API_KEY contains a NUL byte"


# --- child_environment ------------------------------------------------------------------


def test_the_child_inherits_the_base_environment_with_the_overlay_on_top() -> None:
    spec = ChildSpec("server", env={"LANG": "en_US.UTF-8", "TOKEN": "t"})

    assert child_environment(spec, BASE) == {
        "PATH": "/usr/bin",
        "HOME": "/home/me",
        "LANG": "en_US.UTF-8",
        "TOKEN": "t",
    }


def test_an_overlay_value_of_none_removes_the_variable_and_ignores_absent_ones() -> None:
    spec = ChildSpec("server", env={"HOME": None, "NEVER_SET": None})

    assert child_environment(spec, BASE) == {"PATH": "/usr/bin", "LANG": "C.UTF-8"}


def test_without_inheritance_the_child_gets_exactly_the_overlay() -> None:
    spec = ChildSpec("server", env={"TOKEN": "t", "HOME": None, "EMPTY": ""}, inherit_env=False)

    assert child_environment(spec, BASE) == {"TOKEN": "t", "EMPTY": ""}


def test_building_the_environment_never_changes_the_base() -> None:
    base = dict(BASE)

    child_environment(ChildSpec("server", env={"HOME": None, "NEW": "1"}), base)

    assert base == BASE


def test_without_a_base_the_child_inherits_the_gateways_own_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_TEST_INHERITED", "yes")
    monkeypatch.setenv("GATEWAY_TEST_REMOVED", "no")
    spec = ChildSpec("server", env={"GATEWAY_TEST_REMOVED": None, "GATEWAY_TEST_ADDED": "1"})

    env = child_environment(spec)

    assert env["GATEWAY_TEST_INHERITED"] == "yes"
    assert env["GATEWAY_TEST_ADDED"] == "1"
    assert "GATEWAY_TEST_REMOVED" not in env


# --- naming -----------------------------------------------------------------------------


def test_argv_is_the_command_then_its_arguments() -> None:
    assert ChildSpec("npx", ("-y", "pkg")).argv == ["npx", "-y", "pkg"]


@pytest.mark.parametrize(
    ("spec", "label"),
    [(ChildSpec("/usr/local/bin/server"), "server"), (ChildSpec("/usr/bin/npx", name="github"), "github")],
)
def test_a_child_is_labelled_by_its_name_or_else_its_program(spec: ChildSpec, label: str) -> None:
    assert spec.label == label
