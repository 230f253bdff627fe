"""The topology solver alone, in pure Python: one pass that places a 256-member gang on a
4-level tree of 2,000 nodes (2 zones x 5 rows x 10 racks x 20 nodes), a third of the cluster
already busy.

Compared, in the same run, with a pass that places the same gang without constraints (the
node finder's path), so the figure to read is the ratio; the absolute time says whether
"well under a second" holds on this machine. Each case runs several times; the median counts.

    python -m bench.solver            # also part of `make bench`
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

from bench.report import table, write
from scheduler.codecs.objects import node_from_dict, pod_from_dict
from scheduler.codecs.podgroups import podgroup_from_dict
from scheduler.codecs.topology import group_from_configmap, topology_from_configmap
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.pods import GangKey
from scheduler.model.snapshot import Snapshot

LEVELS = ("zone", "row", "rack", "node")
SHAPE = (2, 5, 10, 20)  # 2,000 nodes
MEMBERS = 256
CONSTRAINTS = {
    "zone": {"type": "pack", "isHard": True},
    "row": {"type": "spread", "partitions": 2},
    "rack": {"type": "pack"},
    "node": {"type": "spread", "min": 2, "max": 4},
}


def _pod(name: str, *, labels: dict[str, str], node: str = "", gpu: int = 1) -> dict:
    spec: dict = {
        "schedulerName": "gang-scheduler",
        "containers": [
            {"name": "main", "resources": {"requests": {"cpu": "2", "nvidia.com/gpu": str(gpu)}}}
        ],
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}", "labels": labels},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def cluster() -> tuple[dict, dict, list]:
    """Nodes, the topology ConfigMap's data, and the pods already running."""
    tree: dict = {}
    nodes = {}
    running = []
    i = 0
    for z in range(SHAPE[0]):
        for r in range(SHAPE[1]):
            for k in range(SHAPE[2]):
                rack = tree.setdefault(f"zone-{z}", {}).setdefault(f"row-{z}-{r}", {})
                rack = rack.setdefault(f"rack-{z}-{r}-{k}", {})
                for _ in range(SHAPE[3]):
                    name = f"node-{i}"
                    rack[name] = {}
                    nodes[name] = node_from_dict(
                        {
                            "metadata": {"name": name},
                            "status": {
                                "allocatable": {"cpu": "64", "nvidia.com/gpu": "8", "pods": "110"},
                                "conditions": [{"type": "Ready", "status": "True"}],
                            },
                        }
                    )
                    if i % 3 == 0:  # a third of the nodes half busy
                        running.append(
                            pod_from_dict(_pod(f"busy-{i}", labels={}, node=name, gpu=4))
                        )
                    i += 1
    data = {"level-names": json.dumps(list(LEVELS)), "tree": json.dumps(tree)}
    return nodes, data, running


def snapshots() -> tuple[Snapshot, Snapshot]:
    nodes, data, running = cluster()
    topology, errors = topology_from_configmap(data)
    assert topology is not None, errors
    group = group_from_configmap(
        {
            "metadata": {"name": "big", "namespace": "bench"},
            "data": {"name": "big", "size": str(MEMBERS), "constraints": json.dumps(CONSTRAINTS)},
        }
    )
    assert group.errors == (), group.errors
    sakkara = [
        pod_from_dict(_pod(f"big-{i}", labels={names.SAKKARA_GROUP_NAME: "big"}))
        for i in range(MEMBERS)
    ]
    plain = [
        pod_from_dict(_pod(f"big-{i}", labels={names.POD_GROUP_LABEL: "big"}))
        for i in range(MEMBERS)
    ]
    # What the cache keeps per node, built once as the cache would (not per pass).
    infos = Snapshot(nodes=nodes, pods=tuple(running)).infos()
    with_topology = Snapshot(
        nodes=nodes,
        node_infos=infos,
        pods=(*running, *sakkara),
        topology=topology,
        groups={GangKey("bench", "big"): group},
    )
    podgroup = podgroup_from_dict(
        {"metadata": {"name": "big", "namespace": "bench"}, "spec": {"minMember": MEMBERS}}
    )
    without = Snapshot(
        nodes=nodes,
        node_infos=infos,
        pods=(*running, *plain),
        podgroups={podgroup.key: podgroup},
    )
    return with_topology, without


def timed(snapshot: Snapshot, runs: int) -> tuple[float, int]:
    times = []
    bound = 0
    for _ in range(runs):
        started = time.perf_counter()
        result = schedule(snapshot, now=1_800_000_000.0)
        times.append(time.perf_counter() - started)
        bound = sum(len(g.bindings) for g in result.bindings)
    return statistics.median(times), bound


def run(runs: int = 5) -> dict:
    with_topology, without = snapshots()
    solver_seconds, solver_bound = timed(with_topology, runs)
    plain_seconds, plain_bound = timed(without, runs)
    return {
        "machine": f"{os.cpu_count()} cores",
        "nodes": len(with_topology.nodes),
        "levels": list(LEVELS),
        "members": MEMBERS,
        "constraints": CONSTRAINTS,
        "runs": runs,
        "topology_pass_ms": round(solver_seconds * 1000, 1),
        "topology_members_bound": solver_bound,
        "plain_pass_ms": round(plain_seconds * 1000, 1),
        "plain_members_bound": plain_bound,
        "ratio_topology_to_plain": round(solver_seconds / plain_seconds, 2),
    }


def markdown(r: dict) -> str:
    return "\n".join(
        [
            f"# Topology solver ({r['nodes']} nodes, levels {' > '.join(r['levels'])}, "
            f"{r['machine']}, median of {r['runs']})",
            "",
            *table(
                ["pass", "members placed", "ms", "ratio"],
                [
                    [
                        f"gang of {r['members']}, no constraints (node finder)",
                        r["plain_members_bound"],
                        r["plain_pass_ms"],
                        "1.00",
                    ],
                    [
                        f"gang of {r['members']}, constraints on all 4 levels (solver)",
                        r["topology_members_bound"],
                        r["topology_pass_ms"],
                        f"{r['ratio_topology_to_plain']:.2f}",
                    ],
                ],
            ),
            "",
            f"Constraints: `{json.dumps(r['constraints'])}`; a third of the nodes half busy.",
            "",
        ]
    )


def main() -> int:
    results = run()
    write("topology-solver", results, markdown(results), quiet=False)
    ok = results["topology_members_bound"] == results["members"]
    if not ok:
        print("the solver did not place the whole gang", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
