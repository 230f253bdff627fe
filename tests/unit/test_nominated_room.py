"""A preemptor's nominated room is held as its victims leave, and bound as it stands once
the gang fits: so it is held only where the member may still go, as a NonStrict hold is
(``allocate.keep_holds``). A member whose node no longer suits it at all is nominated
nowhere and placed anew (a topology-placed gang, whole); one kept from its node by the pods
there for now keeps its nomination but holds nothing this pass."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.scheduling import schedule
from scheduler.model.pods import GangKey
from scheduler.model.snapshot import GangState
from tests.unit.builders import T0, gang_pods, node, pod, snapshot
from tests.unit.test_allocation import bind_map
from tests.unit.test_preemption import two_racks_half_full

HOST = "kubernetes.io/hostname"


def test_a_nominated_member_is_not_bound_beside_a_pod_it_must_keep_away_from() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": HOST}
    anti = {
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    }
    pods = [
        pod(f"w-{i}", gang="w", min_available=2, cpu="2", priority=100, spec=anti) for i in range(2)
    ]
    nodes = [node(f"n{i}", cpu="4", labels={HOST: f"n{i}"}) for i in range(3)]
    # Another scheduler's pod came onto the freed node meanwhile.
    intruder = pod(
        "intruder", cpu="1", labels={"app": "x"}, node_name="n1", phase="Running",
        scheduler="other",
    )  # fmt: skip
    state = GangState(
        first_attempt=T0 - 5, nominated={pods[0].ref: "n1", pods[1].ref: "n2"},
        nominated_at=T0 - 2,
    )  # fmt: skip
    snap = replace(snapshot(nodes, [*pods, intruder]), memory={GangKey("default", "w"): state})
    placed = bind_map(schedule(snap, now=T0))
    assert placed["w-0"] != "n1", "held room is bound only where the pod may go"
    assert placed == {"w-0": "n0", "w-1": "n2"}


def test_a_topology_placed_preemptor_whose_member_no_longer_fits_is_arranged_anew() -> None:
    """Its members bind where the solver placed them when it chose the victims, or not at
    all: one member's node cordoned, the whole gang is placed again at once, rather than
    waiting out its nomination (120 s) for room that will not come."""
    nodes, topology, low, high = two_racks_half_full()
    first = schedule(snapshot(nodes, [*low, *high], topology=topology), now=T0)
    assert {n.pod.name: n.node for n in first.nominations} == {"high-0": "n2", "high-1": "n3"}
    # Every low pod has gone since, and n3 was cordoned.
    later = [*nodes[:3], replace(nodes[3], unschedulable=True)]
    after = schedule(snapshot(later, high, topology=topology, memory=first.memory), now=T0 + 5)
    assert sorted(bind_map(after).values()) == ["n0", "n1"], "whole, in the rack that is free"
    assert {n.pod.name: n.node for n in after.nominations} == {"high-0": "", "high-1": ""}
    assert [e for e in after.events if e.reason == "HoldReleased"]


def test_a_member_let_go_and_nominated_anew_in_one_pass_gets_one_nomination() -> None:
    """Both would be sent at once, and the stale one might land last."""
    nodes = [node("n0", cpu="4"), replace(node("n1", cpu="4"), unschedulable=True)]
    low = replace(
        pod("low", cpu="3", priority=1, created=T0 - 500), node_name="n0", phase="Running"
    )
    high = gang_pods("high", 1, gang="high", min_available=1, priority=100, cpu="3")
    state = GangState(first_attempt=T0 - 5, nominated={high[0].ref: "n1"}, nominated_at=T0 - 2)
    snap = replace(snapshot(nodes, [low, *high]), memory={GangKey("default", "high"): state})
    result = schedule(snap, now=T0)
    assert [e.pod.name for e in result.evictions] == ["low"]
    assert [(n.pod.name, n.node) for n in result.nominations] == [("high-0", "n0")]
