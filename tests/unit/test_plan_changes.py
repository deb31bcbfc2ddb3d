"""Reading a saved plan's JSON for what it destroys or replaces (pure)."""

from __future__ import annotations

from skyinfra.terraform.plan import ResourceChange, destructive_changes

PLAN = {
    "resource_changes": [
        {
            "address": 'module.nodes.terraform_data.node["node-0"]',
            "change": {"actions": ["no-op"]},
        },
        {
            "address": 'module.nodes.terraform_data.node["node-1"]',
            "change": {"actions": ["delete"]},
            "action_reason": "delete_because_each_key",
        },
        {
            "address": 'module.nodes.aws_instance.this["node-0"]',
            "change": {
                "actions": ["delete", "create"],
                "replace_paths": [["instance_type"], ["ami"]],
            },
            "action_reason": "replace_because_cannot_update",
        },
        {"address": "module.network.aws_vpc.this[0]", "change": {"actions": ["create"]}},
        {"address": "aws_security_group.x", "change": {"actions": ["create", "delete"]}},
    ]
}


def test_destroys_and_replaces_with_reasons() -> None:
    assert destructive_changes(PLAN) == [
        ResourceChange(
            'module.nodes.terraform_data.node["node-1"]',
            "destroy",
            "the cluster no longer has it (fewer nodes)",
            "delete_because_each_key",
        ),
        ResourceChange(
            'module.nodes.aws_instance.this["node-0"]',
            "replace",
            "a setting changed that cannot be updated in place (ami, instance_type)",
            "replace_because_cannot_update",
        ),
        ResourceChange("aws_security_group.x", "replace", "as planned"),
    ]


def test_a_plan_without_losses() -> None:
    assert destructive_changes({"resource_changes": PLAN["resource_changes"][3:4]}) == []
    assert destructive_changes({}) == []


def test_replacing_a_tainted_resource_is_a_repair() -> None:
    (tainted,) = destructive_changes(
        {
            "resource_changes": [
                {
                    "address": 'module.nodes.terraform_data.node["node-0"]',
                    "change": {"actions": ["delete", "create"]},
                    "action_reason": "replace_because_tainted",
                }
            ]
        }
    )
    assert tainted.is_repair and tainted.reason.startswith("it is tainted")
    assert not any(change.is_repair for change in destructive_changes(PLAN))
