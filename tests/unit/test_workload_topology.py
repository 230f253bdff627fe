"""A 1.37 PodGroup's ``schedulingConstraints.topology`` (TopologyAwareWorkloadScheduling):
all its pods in one domain of the node label it names, as kube-scheduler's
TopologyPlacementGenerator places them: a hard constraint, never placed as if absent. The
label must be a level of the tree --topology-from-labels builds; a tree made for one gang
would change it for every other gang that places by the tree."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.codecs.podgroups import workload_podgroup_from_dict
from scheduler.core.scheduling import schedule
from scheduler.model.config import Config
from tests.unit.builders import T0, gang_pods, node, snapshot
from tests.unit.test_allocation import bind_map

RACK = "topology.kubernetes.io/rack"
RACKS = Config(topology_labels=(("rack", RACK),))


def group(*constraints: object, minimum: int = 4) -> object:
    spec = {"schedulingPolicy": {"gang": {"minCount": minimum}}}
    if constraints:
        spec["schedulingConstraints"] = {"topology": list(constraints)}
    return workload_podgroup_from_dict(
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "metadata": {"name": "train", "namespace": "default", "uid": "uid-train"},
            "spec": spec,
        }
    )


def _racks() -> tuple[list, list]:
    """rack-a: two nodes with 1 cpu free each (packing fills them first); rack-b: two with
    2 free each. A gang of four 1-cpu members fits across both racks, or in rack-b alone."""
    nodes = [
        node("a0", cpu="2", labels={RACK: "rack-a"}),
        node("a1", cpu="2", labels={RACK: "rack-a"}),
        node("b0", cpu="2", labels={RACK: "rack-b"}),
        node("b1", cpu="2", labels={RACK: "rack-b"}),
    ]
    fillers = [
        replace(p, node_name=n, phase="Running")
        for p, n in zip(gang_pods("fill", 2, scheduler="other", cpu="1"), ("a0", "a1"), strict=True)
    ]
    return nodes, fillers


def _train() -> list:
    return gang_pods("train", 4, cpu="1", spec={"schedulingGroup": {"podGroupName": "train"}})


def test_the_gang_keeps_to_one_domain_of_the_label() -> None:
    nodes, fillers = _racks()
    snap = snapshot(nodes, [*fillers, *_train()], podgroups=[group({"key": RACK})])
    assert set(bind_map(schedule(snap, now=T0, config=RACKS)).values()) == {"b0", "b1"}


def test_without_the_constraint_it_goes_across_racks() -> None:
    nodes, fillers = _racks()
    result = schedule(
        snapshot(nodes, [*fillers, *_train()], podgroups=[group()]), now=T0, config=RACKS
    )
    assert len(bind_map(result)) == 4
    assert {"a0", "a1"} & set(bind_map(result).values())


def test_a_gang_no_domain_can_hold_waits_and_says_so() -> None:
    nodes, fillers = _racks()
    bigger = gang_pods("train", 5, cpu="1", spec={"schedulingGroup": {"podGroupName": "train"}})
    five = group({"key": RACK}, minimum=5)
    result = schedule(snapshot(nodes, [*fillers, *bigger], podgroups=[five]), now=T0, config=RACKS)
    assert bind_map(result) == {}
    (said,) = {e.message for e in result.events}
    assert "no rack has room for the gang in one unit (PodGroup spec.schedulingConstr" in said


def test_the_labels_tree_the_scheduler_was_given_must_have_the_key() -> None:
    nodes, fillers = _racks()
    config = Config(topology_labels=(("zone", "topology.kubernetes.io/zone"),))
    snap = snapshot(nodes, [*fillers, *_train()], podgroups=[group({"key": RACK})])
    result = schedule(snap, now=T0, config=config)
    assert bind_map(result) == {}
    said = " ".join(e.message for e in result.events)
    assert f"no level of topology 'node-labels' is read from node label {RACK}" in said, said
    assert f"--topology-from-labels naming it (LEVEL={RACK})" in said


def test_without_a_tree_the_gang_waits_and_says_which_flag_builds_it() -> None:
    nodes, fillers = _racks()
    snap = snapshot(nodes, [*fillers, *_train()], podgroups=[group({"key": RACK})])
    result = schedule(snap, now=T0)
    assert bind_map(result) == {}
    said = " ".join(e.message for e in result.events)
    assert f"start the scheduler with --topology-from-labels naming it (LEVEL={RACK})" in said


def test_a_label_constraint_changes_nothing_for_other_gangs() -> None:
    """A Sakkara-free gang on a node without the label binds as before (the tree is not
    rebuilt from the PodGroup's label)."""
    nodes = [node("bare", cpu="4"), node("a0", cpu="1", labels={RACK: "rack-a"})]
    other = gang_pods("o", 2, gang="o", min_available=2, cpu="2")
    snap = snapshot(nodes, [*other, *_train()], podgroups=[group({"key": RACK})])
    assert bind_map(schedule(snap, now=T0)) == {"o-0": "bare", "o-1": "bare"}


@pytest.mark.parametrize(
    ("constraints", "error"),
    [
        ([{"key": RACK}, {"key": "zone"}], "at most one"),
        (["rack"], "one object with key"),
        ([{"key": ""}], "one object with key"),
        ([{"key": "not a label key!"}], "a node label key"),
    ],
)
def test_a_malformed_topology_constraint_is_said_with_what_is_allowed(
    constraints: list, error: str
) -> None:
    (said,) = group(*constraints).errors
    assert said.startswith("spec.schedulingConstraints.topology must be ")
    assert error in said
