"""The steps of an exchange (gateway.relay.steps): written down in the order they run, and
sorted into plans by client era and method."""

from __future__ import annotations

import re

from gateway.protocol.versions import Era
from gateway.relay import steps
from gateway.relay.turn import Plan

NAMES = {step.act: step.name for step in steps.STEPS}


def names(plan: Plan, child: Era) -> list[list[str]]:
    """The plan's steps, each stretch in order, for a call on a child of ``child``'s era."""
    stretches = (plan.before_child, plan.on_child[child], plan.on_reply[child])
    return [[NAMES[stage[1]] for stage in stretch] for stretch in stretches]


def test_a_step_on_the_child_or_its_reply_is_in_the_plans_of_the_child_eras_it_names() -> None:
    for era in Era:
        for method in (*sorted(steps.PLANS[era].keys() - {None}), "x/unknown"):
            plan = steps.plan_for(era, method)
            for child in Era:
                on = [step for step in steps.ON_CHILD if steps._fits(step, era, method)]
                on_reply = [step for step in steps.ON_REPLY if steps._fits(step, era, method)]
                assert [stage[1] for stage in plan.on_child[child]] == [
                    step.act for step in on if step.child_eras is None or child in step.child_eras
                ]
                assert [stage[1] for stage in plan.on_reply[child]] == [
                    step.act for step in on_reply if step.child_eras is None or child in step.child_eras
                ]


def test_the_module_doc_lists_every_step_in_the_order_they_run() -> None:
    assert steps.__doc__ is not None
    listed = re.findall(r"^\s*(\d+)\. ``(\w+)``", steps.__doc__, re.MULTILINE)
    assert [int(number) for number, _ in listed] == list(range(1, len(listed) + 1))
    assert [name for _, name in listed] == [step.name for step in steps.STEPS]


def test_a_modern_tool_call_meets_only_the_steps_for_it() -> None:
    assert names(steps.plan_for(Era.MODERN, "tools/call"), Era.LEGACY) == [
        ["retry", "quota", "roots_round"],
        ["param_headers", "task_required", "child_task", "task"],
        ["translate", "url_round", "bridge_task"],
    ]
    assert names(steps.plan_for(Era.MODERN, "tools/call"), Era.MODERN) == [
        ["retry", "quota", "roots_round"],
        ["param_headers", "task_required", "task"],
        ["translate", "url_round", "adopt_task"],
    ]


def test_a_legacy_tool_call_meets_only_the_steps_for_it() -> None:
    assert names(steps.plan_for(Era.LEGACY, "tools/call"), Era.MODERN) == [
        ["quota", "roots_asked"],
        [],
        ["input_round", "translate", "legacy_url"],
    ]
    assert names(steps.plan_for(Era.LEGACY, "tools/call"), Era.LEGACY) == [
        ["quota", "roots_asked"],
        ["legacy_task"],
        ["task_to_end", "translate", "legacy_url"],
    ]


def test_the_method_specific_steps_are_in_their_methods_plans() -> None:
    assert names(steps.plan_for(Era.MODERN, "tasks/get"), Era.MODERN)[0] == ["tasks", "retry", "quota"]
    assert names(steps.plan_for(Era.MODERN, "server/discover"), Era.LEGACY)[1:] == [
        ["discover"],
        ["translate", "discover_tasks"],
    ]
    assert names(steps.plan_for(Era.MODERN, "server/discover"), Era.MODERN)[1:] == [
        [],
        ["translate", "discover_tasks", "adopt_task"],
    ]
    assert names(steps.plan_for(Era.LEGACY, "logging/setLevel"), Era.LEGACY)[1] == ["set_level"]
    assert names(steps.plan_for(Era.LEGACY, "logging/setLevel"), Era.MODERN)[1] == ["set_level"]
    assert names(steps.plan_for(Era.LEGACY, "tools/list"), Era.MODERN)[2] == [
        "visible_tools",
        "plain_tools",
        "input_round",
        "translate",
    ]
    for method in ("tasks/get", "tasks/result", "tasks/list", "tasks/cancel", "tasks/update", "subscriptions/listen"):
        assert names(steps.plan_for(Era.LEGACY, method), Era.LEGACY)[0] == ["no_tasks", "quota"]
    assert names(steps.plan_for(Era.LEGACY, "resources/subscribe"), Era.LEGACY)[1] == ["subscriptions"]
    assert names(steps.plan_for(Era.LEGACY, "resources/subscribe"), Era.MODERN)[1] == []


def test_a_method_no_step_names_gets_the_steps_for_every_method() -> None:
    assert names(steps.plan_for(Era.MODERN, "resources/list"), Era.MODERN) == [
        ["retry", "quota"],
        [],
        ["translate", "adopt_task"],
    ]
    assert names(steps.plan_for(Era.MODERN, "resources/list"), Era.LEGACY) == [["retry", "quota"], [], ["translate"]]
    assert names(steps.plan_for(Era.LEGACY, "x/unknown"), Era.MODERN) == [["quota"], [], ["input_round", "translate"]]
    assert names(steps.plan_for(Era.LEGACY, "x/unknown"), Era.LEGACY) == [["quota"], [], ["translate"]]
