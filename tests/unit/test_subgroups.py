"""Gangs of gangs (#23): Volcano's ``spec.subGroupPolicy`` read field by field, and placed
whole subgroup by whole subgroup. Bind maps, as Volcano's tests state their expectations."""

from __future__ import annotations

from typing import Any

from scheduler.codecs.objects import volcano_podgroup_from_dict
from scheduler.model.gangs import NetworkTopology, SubGroupPolicy
from scheduler.model.pods import LabelSelector


def read(*policies: Any, **spec: Any) -> Any:
    return volcano_podgroup_from_dict(
        {
            "metadata": {"name": "pg", "namespace": "ml"},
            "spec": {"minMember": 4, "subGroupPolicy": list(policies), **spec},
        }
    )


def test_a_subgroup_policy_is_read_with_volcanos_defaults() -> None:
    podgroup = read(
        {
            "name": "replica",
            "subGroupSize": 8,
            "minSubGroups": 6,
            "matchLabelKeys": ["volcano.sh/partition-id"],
            "labelSelector": {"matchLabels": {"role": "worker"}},
            "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
        },
        {"name": "decode"},
    )
    assert podgroup.errors == ()
    assert podgroup.subgroup_policy == (
        SubGroupPolicy(
            name="replica",
            size=8,
            min_subgroups=6,
            match_label_keys=("volcano.sh/partition-id",),
            selector=LabelSelector(match_labels=(("role", "worker"),)),
            topology=NetworkTopology(mode="hard", highest_tier=1),
        ),
        SubGroupPolicy(name="decode"),  # size 1, no minimum, every pod, no topology
    )


def test_hostile_subgroup_policies_are_errors_that_name_the_field_never_exceptions() -> None:
    first = "spec.subGroupPolicy[0]"
    cases = [
        ("not a list", "spec.subGroupPolicy must be a list"),
        (["x"], f"{first} must be an object"),
        ([{"subGroupSize": 0}], f"{first}.subGroupSize must be a whole number from 1"),
        ([{"subGroupSize": "8"}], "subGroupSize must be a whole number from 1, got '8'"),
        ([{"minSubGroups": -1}], f"{first}.minSubGroups must be a whole number from 0"),
        ([{"minSubGroups": 2**31}], "minSubGroups must be a whole number from 0"),
        ([{"matchLabelKeys": "k"}], "matchLabelKeys must be a list of label keys"),
        ([{"matchLabelKeys": [""]}], "matchLabelKeys must be a list of label keys"),
        ([{"name": "a"}, {"name": "a"}], "spec.subGroupPolicy[1].name 'a' is used twice"),
        ([{"name": 5}], f"{first}.name must be a string"),
        ([{"networkTopology": {"mode": "strict"}}], "mode must be one of hard, soft; got 'strict'"),
        ([{"networkTopology": {"highestTierAllowed": -1}}], "highestTierAllowed must be a whole"),
        ([{"networkTopology": {"highestTierAllowed": 1, "highestTierName": "r"}}], "cannot both"),
        ([{"networkTopology": "hard"}], f"{first}.networkTopology must be an object"),
    ]  # fmt: skip
    for raw, said in cases:
        podgroup = volcano_podgroup_from_dict(
            {"metadata": {"name": "pg"}, "spec": {"minMember": 1, "subGroupPolicy": raw}}
        )
        assert len(podgroup.errors) == 1, (raw, podgroup.errors)
        assert said in podgroup.errors[0], (raw, podgroup.errors)
