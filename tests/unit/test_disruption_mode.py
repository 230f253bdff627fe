"""A 1.37 PodGroup's disruptionMode in preemption: ``single`` (the default) lets members above
the minimum go one at a time, as every gang of ours may; ``all`` makes the whole gang one
victim, as kube-scheduler 1.37 counts it (``framework/preemption``)."""

from __future__ import annotations

from dataclasses import replace

from scheduler.codecs.podgroups import workload_podgroup_from_dict
from scheduler.core.scheduling import schedule
from tests.unit.builders import T0, gang_pods, node, snapshot
from tests.unit.test_preemption import evicted


def _preempted(mode: object | None) -> list[str]:
    """A low gang of four 1-cpu members (minimum 2) fills n0; a high pod of 1 cpu waits."""
    spec = {"schedulingPolicy": {"gang": {"minCount": 2}}}
    if mode is not None:
        spec["disruptionMode"] = mode
    group = workload_podgroup_from_dict(
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "metadata": {"name": "low", "namespace": "default", "uid": "uid-low"},
            "spec": spec,
        }
    )
    low = [
        replace(p, node_name="n0", phase="Running")
        for p in gang_pods(
            "low", 4, cpu="1", priority=0, spec={"schedulingGroup": {"podGroupName": "low"}}
        )
    ]
    high = gang_pods("high", 1, gang="high", min_available=1, cpu="1", priority=1000)
    snap = snapshot([node("n0", cpu="4")], [*low, *high], podgroups=[group])
    return evicted(schedule(snap, now=T0))


def test_single_lets_one_member_above_the_minimum_go() -> None:
    assert len(_preempted({"single": {}})) == 1


def test_the_default_is_single() -> None:
    assert len(_preempted(None)) == 1


def test_all_makes_the_whole_gang_one_victim() -> None:
    assert _preempted({"all": {}}) == ["low-0", "low-1", "low-2", "low-3"]


def test_v1alpha2s_podgroup_mode_is_all() -> None:
    assert len(_preempted("PodGroup")) == 4
