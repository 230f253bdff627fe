"""Reading the topology ConfigMap and the constraint JSON of seed 004."""

from __future__ import annotations

import json

import pytest

from scheduler.codecs.gangs import read_claim, read_options
from scheduler.codecs.topology import (
    group_from_configmap,
    read_constraints,
    topology_from_configmap,
)
from scheduler.model.pods import GangKey, GangSource
from scheduler.model.topology import SPREAD, Topology, topology_from_labels

SEED_A = '{"rack": {"type": "pack"}, "node": {"type": "spread"}}'

SEED_TREE = {
    "rack-0": {"node-0": {}, "node-1": {}, "node-2": {}},
    "rack-1": {"node-3": {}, "node-4": {}, "node-5": {}},
}


def configmap(tree: object = SEED_TREE, levels: object = ("rack", "node")) -> dict[str, str]:
    return {
        "name": "cluster-tree",
        "resource-names": json.dumps(["cpu", "memory", "nvidia.com/gpu"]),
        "level-names": json.dumps(list(levels) if isinstance(levels, tuple) else levels),
        "tree": json.dumps(tree),
    }


def test_the_seed_example_reads_as_two_racks_of_three_nodes() -> None:
    topology, errors = topology_from_configmap(configmap())
    assert errors == []
    assert topology is not None
    assert topology.levels == ("rack", "node")
    assert topology.unit("node-4", "rack") == "rack-1"
    assert topology.resource_names == ("cpu", "memory", "nvidia.com/gpu")
    assert topology.distance("node-0", "node-0") == 0
    assert topology.distance("node-0", "node-1") == 2
    assert topology.distance("node-0", "node-3") == 4


def test_unknown_and_duplicate_nodes_are_left_out_with_a_warning() -> None:
    tree = {"rack-0": {"node-0": {}, "ghost": {}}, "rack-1": {"node-0": {}}}
    topology, errors = topology_from_configmap(configmap(tree), known_nodes={"node-0"})
    assert errors == []
    assert topology is not None
    assert dict(topology.paths) == {"node-0": ("rack-0", "node-0")}
    assert topology.warnings == (
        "tree names node ghost, which does not exist; ignored",
        "node node-0 appears twice in the tree; the first is used",
    )


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"tree": "{}"}, "topology key 'level-names' is missing"),
        (configmap() | {"tree": "{rack"}, "topology key 'tree' is not valid JSON"),
        (configmap(levels=("zone", "rack", "node")), "stops at level 'rack'"),
        (configmap(levels=("node",)), "has children; the tree is deeper than level-names says"),
        (configmap(levels=("rack", "rack")), "repeats a level"),
    ],
)
def test_a_malformed_topology_says_what_is_wrong(data: dict[str, str], says: str) -> None:
    topology, errors = topology_from_configmap(data)
    assert topology is None
    assert any(says in e for e in errors), errors


def test_flat_topology_is_the_root_and_the_nodes() -> None:
    flat = Topology.flat(["a", "b"])
    assert flat.levels == ("node",)
    assert flat.distance("a", "b") == 2


def test_constraints_of_the_seed_read_in_full() -> None:
    constraints = read_constraints(
        '{"rack": {"type": "pack"}, '
        '"node": {"type": "spread", "partitions": 2, "min": 2, "max": 4, "isHard": true}}'
    )
    assert constraints.errors == ()
    node = constraints.by_level["node"]
    assert (node.type, node.partitions, node.min, node.max, node.hard) == (SPREAD, 2, 2, 4, True)
    assert constraints.by_level["rack"].hard is False


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ('{"node": {"type": "scatter"}}', "type must be pack or spread, got 'scatter'"),
        ('{"node": {"min": 5, "max": 3}}', "min (5) is greater than max (3)"),
        ('{"node": {"factor": 4, "max": 3}}', "no count between 1 and 3 is a multiple of factor 4"),
        ('{"node": {"partitions": 0}}', "'partitions' must be a whole number of at least 1"),
        ('{"node": {"isHard": "yes"}}', "isHard must be true or false"),
        ('{"node": {"spreadd": 1}}', "unknown keys ['spreadd']"),
        ("[1, 2]", "constraints must be a JSON object keyed by level"),
        ("{node", "constraints are not valid JSON"),
    ],
)
def test_inconsistent_constraints_are_rejected_with_the_reason(raw: str, says: str) -> None:
    errors = read_constraints(raw).errors
    assert any(says in e for e in errors), errors


def test_group_configmap_reads_name_size_priority_and_constraints() -> None:
    group = group_from_configmap(
        {
            "metadata": {"name": "cm-a", "namespace": "team", "labels": {"sakkara.group": ""}},
            "data": {"name": "group-a", "size": "8", "priority": "5", "constraints": SEED_A},
        }
    )
    assert (group.namespace, group.name, group.configmap) == ("team", "group-a", "cm-a")
    assert (group.size, group.priority) == (8, 5)
    assert group.constraints.by_level["node"].type == SPREAD
    assert group.errors == ()


def test_group_configmap_with_a_bad_size_says_which_key_and_what_is_allowed() -> None:
    group = group_from_configmap(
        {"metadata": {"name": "g", "namespace": "team"}, "data": {"size": "eight"}}
    )
    assert group.errors == (
        "group ConfigMap team/g: key 'size' must be a whole number of at least 1, got 'eight'",
    )


def test_a_pod_labelled_with_a_sakkara_group_claims_that_gang() -> None:
    claim = read_claim({"sakkara.group.name": "group-a"}, {}, namespace="team")
    assert claim is not None
    assert claim.key == GangKey("team", "group-a")
    assert claim.source is GangSource.SAKKARA


def test_constraint_annotation_errors_name_the_annotation() -> None:
    options = read_options({"gang-scheduler.io/topology-constraints": "{rack"}, namespace="ns")
    assert options.errors[0].startswith("annotation gang-scheduler.io/topology-constraints:")


def test_topology_from_labels_puts_the_level_with_fewest_values_on_top() -> None:
    nodes = {f"n{i}": {"zone": f"z{i // 4}", "rack": f"r{i // 2}"} for i in range(8)} | {"bare": {}}
    topology = topology_from_labels((("rack", "rack"), ("zone", "zone")), nodes)
    assert topology.levels == ("zone", "rack", "node")
    assert topology.paths["n3"] == ("z0", "r1", "n3")
    assert "bare" not in topology.paths
