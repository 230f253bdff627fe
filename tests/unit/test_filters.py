"""Node filters, and the reasons a FailedScheduling event counts."""

from __future__ import annotations

import pytest

from scheduler.core.filtering import AFFINITY_MISMATCH, NOT_READY, UNSCHEDULABLE, static_reason
from scheduler.core.placing import Ledger, NodeFinder
from tests.unit.builders import node, pod

GPU_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("the_pod", "the_node", "reason"),
    [
        (pod("p"), node("n"), ""),
        (pod("p", node_selector={"rack": "r1"}), node("n", labels={"rack": "r1"}), ""),
        (pod("p", node_selector={"rack": "r1"}), node("n", labels={"rack": "r2"}),
         AFFINITY_MISMATCH),
        (pod("p"), node("n", ready=False), NOT_READY),
        (pod("p"), node("n", unschedulable=True), UNSCHEDULABLE),
        (pod("p"), node("n", taints=[GPU_TAINT]), "node(s) had untolerated taint {dedicated: gpu}"),
        (pod("p", tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu"}]),
         node("n", taints=[GPU_TAINT]), ""),
        (pod("p", tolerations=[{"operator": "Exists"}]), node("n", taints=[GPU_TAINT]), ""),
        (pod("p", tolerations=[{"key": "dedicated", "value": "cpu"}]),
         node("n", taints=[GPU_TAINT]), "node(s) had untolerated taint {dedicated: gpu}"),
        (pod("p"), node("n", taints=[{"key": "soft", "effect": "PreferNoSchedule"}]), ""),
        (pod("p", tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]),
         node("n", ready=False), ""),
    ],
)  # fmt: skip
def test_static_filters(the_pod, the_node, reason) -> None:
    assert static_reason(the_pod, the_node) == reason


@pytest.mark.parametrize(
    ("expression", "labels", "fits"),
    [
        ({"key": "zone", "operator": "In", "values": ["a", "b"]}, {"zone": "b"}, True),
        ({"key": "zone", "operator": "In", "values": ["a"]}, {"zone": "b"}, False),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, {}, True),
        ({"key": "gpu", "operator": "Exists"}, {"gpu": ""}, True),
        ({"key": "gpu", "operator": "DoesNotExist"}, {"gpu": ""}, False),
        ({"key": "cores", "operator": "Gt", "values": ["16"]}, {"cores": "32"}, True),
        ({"key": "cores", "operator": "Lt", "values": ["16"]}, {"cores": "32"}, False),
        ({"key": "cores", "operator": "Gt", "values": ["16"]}, {"cores": "many"}, False),
    ],
)
def test_required_node_affinity(expression: dict, labels: dict, fits: bool) -> None:
    affinity = {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}
    reason = static_reason(pod("p", affinity=affinity), node("n", labels=labels))
    assert (reason == "") is fits


def test_affinity_terms_are_alternatives_and_match_fields_name_the_node() -> None:
    affinity = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n7"]}]},
        ]
    }
    assert static_reason(pod("p", affinity=affinity), node("n7")) == ""
    assert static_reason(pod("p", affinity=affinity), node("n8")) == AFFINITY_MISMATCH


def test_explanation_counts_every_reason_across_all_nodes() -> None:
    nodes = {n.name: n for n in [
        *(node(f"gpu-{i}", gpu=4) for i in range(8)),
        *(node(f"infra-{i}", gpu=8, taints=[GPU_TAINT]) for i in range(4)),
    ]}  # fmt: skip
    ledger = Ledger.of(nodes, [])
    message = NodeFinder(nodes, ledger).explain(pod("big", gpu=8), ledger).message
    assert message == (
        "0/12 nodes are available: 8 Insufficient nvidia.com/gpu, "
        "4 node(s) had untolerated taint {dedicated: gpu}."
    )


def test_finder_packs_onto_the_fullest_node_first() -> None:
    nodes = {n.name: n for n in [node("empty"), node("half")]}
    busy = pod("busy", cpu="4", node_name="half", phase="Running")
    ledger = Ledger.of(nodes, [busy])
    assert NodeFinder(nodes, ledger).find(pod("p"), ledger) == "half"
