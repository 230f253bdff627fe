"""Reading the topology ConfigMap and the constraint JSON of seed 004."""

from __future__ import annotations

import json

import pytest

from scheduler.codecs.topology import read_constraints, topology_from_configmap
from scheduler.model.topology import SPREAD, Topology

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
