"""What a pod spec says beyond resources and node selection (issue #11): scheduling gates,
host ports, inter-pod affinity and anti-affinity, honoured for whole gangs, as bind maps."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.scheduling import schedule
from tests.unit.builders import T0, gang_pods, node, pod, podgroup, snapshot
from tests.unit.test_allocation import bind_map, events

GATE = {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}


def test_gang_with_one_gated_member_binds_nothing_and_names_the_gated_pod() -> None:
    pods = gang_pods("train", 2, gang="train", min_available=3)
    pods.append(pod("train-2", gang="train", min_available=3, spec=GATE))
    result = schedule(snapshot([node("n0")], pods), now=T0)
    assert bind_map(result) == {}
    gated = [e for e in result.events if e.reason == "SchedulingGated"]
    assert gated, "the gang's members are told why they wait"
    assert "train-2 (kueue.x-k8s.io/admission)" in gated[0].message
    assert result.memory[pods[0].gang.key].condition[1] == "SchedulingGated"  # type: ignore[union-attr]


def test_gang_binds_at_once_when_its_gates_are_removed() -> None:
    pods = [pod(f"train-{i}", gang="train", min_available=3, spec=GATE) for i in range(3)]
    first = schedule(snapshot([node("n0")], pods), now=T0)
    assert bind_map(first) == {}
    assert events(first, "SchedulingGated"), "a fully gated gang says so too"
    ungated = [replace(p, gates=()) for p in pods]
    second = schedule(snapshot([node("n0")], ungated, memory=first.memory), now=T0 + 1)
    assert bind_map(second) == {f"train-{i}": "n0" for i in range(3)}


def test_gated_member_beyond_min_member_does_not_hold_back_the_others() -> None:
    group = podgroup("spark", min_member=2)
    pods = gang_pods("spark", 2, pod_group="spark")
    pods.append(pod("spark-2", pod_group="spark", spec=GATE))
    result = schedule(snapshot([node("n0")], pods, podgroups=[group]), now=T0)
    assert bind_map(result) == {"spark-0": "n0", "spark-1": "n0"}


def test_gated_single_pod_is_not_bound_and_gets_no_event() -> None:
    result = schedule(snapshot([node("n0")], [pod("lone", spec=GATE)]), now=T0)
    assert bind_map(result) == {}
    assert not result.events, "the API server's SchedulingGated condition says it already"


def test_every_member_of_a_gang_that_does_not_fit_is_marked_unschedulable_once() -> None:
    pods = gang_pods("train", 3, gang="train", min_available=3, cpu="4")
    first = schedule(snapshot([node("n0", cpu="8")], pods), now=T0)
    assert bind_map(first) == {}
    marked = {c.pod.name: c for c in first.pod_conditions}
    assert sorted(marked) == ["train-0", "train-1", "train-2"]
    condition = marked["train-0"]
    assert (condition.status, condition.reason) == ("False", "Unschedulable")
    assert "Insufficient cpu" in condition.message
    # The watch brings the condition back; the next failure with the same words writes nothing.
    written = [
        replace(p, scheduled_condition=("False", "Unschedulable", condition.message, "t"))
        for p in pods
    ]
    again = schedule(snapshot([node("n0", cpu="8")], written, memory=first.memory), now=T0 + 60)
    assert again.pod_conditions == ()


def test_a_gated_pods_transition_time_is_kept_when_it_becomes_unschedulable() -> None:
    gated_since = "2026-01-01T00:00:00Z"
    lone = replace(
        pod("lone", cpu="16"),
        scheduled_condition=("False", "SchedulingGated", "Scheduling is blocked", gated_since),
    )
    result = schedule(snapshot([node("n0", cpu="8")], [lone]), now=T0)
    (condition,) = result.pod_conditions
    assert condition.reason == "Unschedulable"
    assert condition.last_transition == gated_since
