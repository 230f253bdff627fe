"""A 1.37 PodGroup's preemptionPolicy (PodGroupPreemptionPolicy): a group that says Never
waits for room and takes none, as kube-scheduler's PodGroupEvaluator does not preempt for it;
PreemptLowerPriority (the default) preempts."""

from __future__ import annotations

from dataclasses import replace

from scheduler.codecs.objects import workload_podgroup_from_dict
from scheduler.core.explaining import explain
from scheduler.core.scheduling import schedule
from scheduler.model.config import Config
from scheduler.model.pods import GangKey
from tests.unit.builders import T0, gang_pods, node, snapshot
from tests.unit.test_preemption import evicted


def _preempting(policy: str | None) -> list[str]:
    """The low gang of four fills n0; a high upstream PodGroup of one pod, its
    preemptionPolicy ``policy`` (1.37's PodGroupPreemptionPolicy), waits."""
    spec: dict = {"schedulingPolicy": {"gang": {"minCount": 1}}, "priority": 1000}
    if policy is not None:
        spec["preemptionPolicy"] = policy
    high_group = workload_podgroup_from_dict(
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "metadata": {"name": "high", "namespace": "default", "uid": "uid-high"},
            "spec": spec,
        }
    )
    low = [
        replace(p, node_name="n0", phase="Running")
        for p in gang_pods("low", 4, gang="low", min_available=4, cpu="1", priority=0)
    ]
    high = gang_pods(
        "high", 1, cpu="1", priority=1000, spec={"schedulingGroup": {"podGroupName": "high"}}
    )
    snap = snapshot([node("n0", cpu="4")], [*low, *high], podgroups=[high_group])
    return evicted(schedule(snap, now=T0))


def test_a_podgroup_that_never_preempts_waits_and_one_that_may_preempts() -> None:
    assert _preempting("Never") == []
    assert len(_preempting("PreemptLowerPriority")) == 4
    assert len(_preempting(None)) == 4


def test_explain_says_a_podgroup_that_never_preempts_is_why_nothing_is_evicted() -> None:
    group = workload_podgroup_from_dict(
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "metadata": {"name": "high", "namespace": "default", "uid": "uid-high"},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": 1}},
                "priority": 1000,
                "preemptionPolicy": "Never",
            },
        }
    )
    low = [
        replace(p, node_name="n0", phase="Running")
        for p in gang_pods("low", 4, gang="low", min_available=4, cpu="1", priority=0)
    ]
    high = gang_pods(
        "high", 1, cpu="1", priority=1000, spec={"schedulingGroup": {"podGroupName": "high"}}
    )
    snap = snapshot([node("n0", cpu="4")], [*low, *high], podgroups=[group])
    said = "\n".join(explain(snap, GangKey("default", "high"), now=T0, config=Config()))
    assert "its PodGroup's preemptionPolicy is Never" in said, said
