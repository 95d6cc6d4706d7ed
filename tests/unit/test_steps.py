"""The steps of an exchange (gateway.relay.steps): written down in the order they run, and
sorted into plans by client era and method."""

from __future__ import annotations

import re

from gateway.protocol.versions import Era
from gateway.relay import steps
from gateway.relay.turn import Plan

NAMES = {step.act: step.name for step in steps.STEPS}


def names(plan: Plan) -> list[list[str]]:
    return [[NAMES[stage[1]] for stage in stretch] for stretch in plan]


def test_the_module_doc_lists_every_step_in_the_order_they_run() -> None:
    assert steps.__doc__ is not None
    listed = re.findall(r"^\s*(\d+)\. ``(\w+)``", steps.__doc__, re.MULTILINE)
    assert [int(number) for number, _ in listed] == list(range(1, len(listed) + 1))
    assert [name for _, name in listed] == [step.name for step in steps.STEPS]


def test_a_modern_tool_call_meets_only_the_steps_for_it() -> None:
    assert names(steps.plan_for(Era.MODERN, "tools/call")) == [
        ["retry", "quota", "roots_round"],
        ["param_headers", "task_required", "child_task", "task"],
        ["translate", "bridge_task", "adopt_task"],
    ]


def test_a_legacy_tool_call_meets_only_the_steps_for_it() -> None:
    assert names(steps.plan_for(Era.LEGACY, "tools/call")) == [
        ["quota", "roots_asked"],
        [],
        ["input_round", "translate"],
    ]


def test_the_method_specific_steps_are_in_their_methods_plans() -> None:
    assert names(steps.plan_for(Era.MODERN, "tasks/get"))[0] == ["tasks", "retry", "quota"]
    assert names(steps.plan_for(Era.MODERN, "server/discover"))[1:] == [
        ["discover"],
        ["translate", "discover_tasks", "adopt_task"],
    ]
    assert names(steps.plan_for(Era.LEGACY, "logging/setLevel"))[1] == ["set_level"]
    assert names(steps.plan_for(Era.LEGACY, "tools/list"))[2] == ["visible_tools", "input_round", "translate"]


def test_a_method_no_step_names_gets_the_steps_for_every_method() -> None:
    assert names(steps.plan_for(Era.MODERN, "resources/list")) == [
        ["retry", "quota"],
        [],
        ["translate", "adopt_task"],
    ]
    assert names(steps.plan_for(Era.LEGACY, "x/unknown")) == [["quota"], [], ["input_round", "translate"]]
