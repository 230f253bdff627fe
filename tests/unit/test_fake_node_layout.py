import json

import pytest

from testbed.nodes import GPU, LEVEL_LABELS, layout, node_manifest, topology_configmap


def test_nodes_are_numbered_rack_by_rack_like_the_seed_example() -> None:
    plan = layout(racks=2, nodes_per_rack=3)
    assert plan.levels == ("rack", "node")
    assert plan.tree == {
        "rack-0": {"node-0": {}, "node-1": {}, "node-2": {}},
        "rack-1": {"node-3": {}, "node-4": {}, "node-5": {}},
    }
    assert plan.nodes[4].labels == {LEVEL_LABELS["rack"]: "rack-1"}


def test_zones_add_a_level_above_the_racks() -> None:
    plan = layout(racks=4, nodes_per_rack=1, zones=2)
    assert plan.levels == ("zone", "rack", "node")
    assert plan.tree == {
        "zone-0": {"rack-0": {"node-0": {}}, "rack-1": {"node-1": {}}},
        "zone-1": {"rack-2": {"node-2": {}}, "rack-3": {"node-3": {}}},
    }
    assert plan.nodes[3].labels[LEVEL_LABELS["zone"]] == "zone-1"


def test_racks_that_do_not_divide_into_zones_are_refused_with_both_numbers() -> None:
    with pytest.raises(ValueError, match=r"--racks \(3\) must be a multiple of --zones \(2\)"):
        layout(racks=3, nodes_per_rack=1, zones=2)


def test_node_manifest_is_marked_for_kwok_and_carries_its_resources() -> None:
    node = layout(racks=1, nodes_per_rack=1).nodes[0]
    manifest = node_manifest(node, cpu="32", memory="128Gi", gpu=8)
    assert manifest["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert manifest["status"]["allocatable"] == {
        "cpu": "32",
        "memory": "128Gi",
        "pods": "110",
        GPU: "8",
    }


def test_node_without_gpus_does_not_advertise_the_resource() -> None:
    node = layout(racks=1, nodes_per_rack=1).nodes[0]
    assert GPU not in node_manifest(node, cpu="4", memory="8Gi")["status"]["allocatable"]


def test_topology_configmap_has_the_seed_keys_as_json() -> None:
    plan = layout(racks=2, nodes_per_rack=1)
    cm = topology_configmap(
        plan, namespace="gang-scheduler-system", name="cluster-tree", resource_names=["cpu"]
    )
    assert cm["metadata"]["labels"] == {"sakkara.topology": ""}
    data = cm["data"]
    assert data["name"] == "cluster-tree"
    assert json.loads(data["resource-names"]) == ["cpu"]
    assert json.loads(data["level-names"]) == ["rack", "node"]
    assert json.loads(data["tree"]) == plan.tree
