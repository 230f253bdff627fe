"""A 1.37 PodGroup's preemptionPolicy (PodGroupPreemptionPolicy): a group that says Never
waits for room and takes none, as kube-scheduler's PodGroupEvaluator does not preempt for it;
PreemptLowerPriority (the default) preempts."""

from __future__ import annotations

from dataclasses import replace

from scheduler.codecs.podgroups import workload_podgroup_from_dict
from scheduler.core.explaining import explain
from scheduler.core.scheduling import schedule
from scheduler.model.config import Config
from scheduler.model.pods import GangKey
from scheduler.model.snapshot import Snapshot
from tests.unit.builders import T0, gang_pods, node, snapshot
from tests.unit.test_preemption import evicted


def _scene(policy: str | None) -> Snapshot:
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
    return snapshot([node("n0", cpu="4")], [*low, *high], podgroups=[high_group])


def test_a_podgroup_that_never_preempts_waits_and_one_that_may_preempts() -> None:
    assert evicted(schedule(_scene("Never"), now=T0)) == []
    assert len(evicted(schedule(_scene("PreemptLowerPriority"), now=T0))) == 4
    assert len(evicted(schedule(_scene(None), now=T0))) == 4


def test_explain_says_a_podgroup_that_never_preempts_is_why_nothing_is_evicted() -> None:
    lines = explain(_scene("Never"), GangKey("default", "high"), now=T0, config=Config())
    said = "\n".join(lines)
    assert "its PodGroup's preemptionPolicy is Never" in said, said
