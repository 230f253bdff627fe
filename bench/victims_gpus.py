"""Preemption for GPUs, by DRA against extended resources: the same seeded cases, the GPUs
asked once as ResourceClaims on ResourceSlices' devices and once as ``nvidia.com/gpu`` in the
pods' requests and the nodes' allocatable; victims and the pass's time in each.

Each case is a cluster of 8-GPU nodes filled to about 95% of its GPUs by running gangs (1 to
8 members of 1, 2, 4 or 8 GPUs, priorities 0 to 3, a minimum between 1 and the gang's size),
and one waiting gang at priority 10 (1 to 8 members of 1 to 8 GPUs) that may fit in what is
left, or only by preempting. One pass of the pure core (``schedule``) decides each encoding,
timed (the best of three).

    python -m bench.victims_gpus --cases 100 --name victims-gpus

Figures go to ``bench/results/NAME.{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from typing import Any

from bench.report import log, table, write
from scheduler.codecs.cel import Selectors
from scheduler.codecs.devices import (
    device_class_from_dict,
    resource_claim_from_dict,
    slice_from_dict,
)
from scheduler.codecs.objects import node_from_dict, pod_from_dict
from scheduler.core.scheduling import schedule
from scheduler.model.snapshot import Snapshot

NODE_GPUS = 8
DRIVER = "gpu.example.com"
EXTENDED = "nvidia.com/gpu"
SCHEDULER = "gang-scheduler"
KOORD_NAME = "gang.scheduling.koordinator.sh/name"
KOORD_MIN = "gang.scheduling.koordinator.sh/min-available"
NOW = 1_800_000_000.0


def case(seed: int) -> dict[str, Any]:
    """One cluster full of GPU gangs, and a gang of higher priority waiting: as plain data,
    which ``encode`` turns into either encoding."""
    pick = random.Random(seed)
    count = pick.choice((16, 32, 64))
    nodes = [f"n{i:03}" for i in range(count)]
    free = {n: list(range(NODE_GPUS)) for n in nodes}
    running: list[dict[str, Any]] = []
    number = misses = 0
    while sum(map(len, free.values())) > 0.05 * NODE_GPUS * count and misses < 50:
        size, gpus = pick.randint(1, 8), pick.choice((1, 1, 2, 4, 8))
        order = nodes[:]
        pick.shuffle(order)
        room = {n: list(d) for n, d in free.items()}
        spots: list[tuple[str, list[int]]] = []
        for node in order:
            while len(room[node]) >= gpus and len(spots) < size:
                spots.append((node, room[node][:gpus]))
                room[node] = room[node][gpus:]
        if len(spots) < size:
            misses += 1
            continue
        free = room
        gang, number = f"r{number}", number + 1
        minimum = size if pick.random() < 0.5 else pick.randint(1, size)
        priority, created = pick.randint(0, 3), pick.randint(0, 20000)
        for i, (node, devices) in enumerate(spots):
            running.append({"name": f"{gang}-{i}", "gang": gang, "min": minimum, "gpus": gpus,
                            "priority": priority, "node": node, "devices": devices,
                            "created": created + i})  # fmt: skip
    size, gpus = pick.randint(1, 8), pick.randint(1, 8)
    waiting = [{"name": f"w-{i}", "gang": "w", "min": size, "gpus": gpus, "priority": 10,
                "node": "", "devices": [], "created": 30000} for i in range(size)]  # fmt: skip
    return {"seed": seed, "nodes": nodes, "pods": running + waiting, "asked": size * gpus}


def _pod(p: dict[str, Any], *, extended: bool) -> dict[str, Any]:
    created = p["created"]
    requests: dict[str, str] = {"cpu": "1"}
    spec: dict[str, Any] = {"schedulerName": SCHEDULER, "priority": p["priority"]}
    if extended:
        requests[EXTENDED] = str(p["gpus"])
    else:
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimName": f"{p['name']}-gpus"}]
    spec["containers"] = [{"name": "main", "resources": {"requests": requests}}]
    if p["node"]:
        spec["nodeName"] = p["node"]
    return {
        "metadata": {
            "name": p["name"],
            "namespace": "default",
            "uid": f"uid-{p['name']}",
            "creationTimestamp": f"2026-01-01T{created // 3600:02}:{created // 60 % 60:02}:"
            f"{created % 60:02}Z",
            "annotations": {KOORD_NAME: p["gang"], KOORD_MIN: str(p["min"])},
        },
        "spec": spec,
        "status": {"phase": "Running" if p["node"] else "Pending"},
    }


def _claim(p: dict[str, Any]) -> dict[str, Any]:
    """The pod's own claim (it owns it, by name): allocated on its node's devices if it
    runs, reserved for it."""
    status: dict[str, Any] = {}
    if p["node"]:
        status = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": p["node"],
                         "device": f"gpu-{d}"}
                        for d in p["devices"]
                    ]
                },
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [p["node"]]}]}]},
            },
            "reservedFor": [{"resource": "pods", "name": p["name"], "uid": f"uid-{p['name']}"}],
        }  # fmt: skip
    return {
        "metadata": {
            "name": f"{p['name']}-gpus",
            "namespace": "default",
            "uid": f"claim-{p['name']}",
            "resourceVersion": "1",
            "ownerReferences": [
                {"kind": "Pod", "name": p["name"], "uid": f"uid-{p['name']}", "controller": True}
            ],
        },
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": p["gpus"]}}
                ]
            }
        },
        "status": status,
    }


def _slice(node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}}
                        for i in range(NODE_GPUS)],
        },
    }  # fmt: skip


def encode(c: dict[str, Any], *, extended: bool, selectors: Selectors) -> Snapshot:
    allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if extended:
        allocatable[EXTENDED] = str(NODE_GPUS)
    nodes = [
        node_from_dict(
            {
                "metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}},
                "status": {
                    "allocatable": allocatable,
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
        for n in c["nodes"]
    ]
    pods = tuple(pod_from_dict(_pod(p, extended=extended)) for p in c["pods"])
    snap = Snapshot(nodes={n.name: n for n in nodes}, pods=pods)
    if extended:
        return snap
    claims = [resource_claim_from_dict(_claim(p)) for p in c["pods"]]
    cls = device_class_from_dict(
        {"metadata": {"name": DRIVER},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}
    )  # fmt: skip
    return replace(
        snap,
        resource_slices=tuple(slice_from_dict(_slice(n)) for n in c["nodes"]),
        device_classes={cls.name: cls},
        resource_claims={claim.key: claim for claim in claims},
        selectors=selectors.evaluate,
    )


def decide(c: dict[str, Any], *, extended: bool, selectors: Selectors) -> dict[str, Any]:
    snap = encode(c, extended=extended, selectors=selectors)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        result = schedule(snap, now=NOW)
        best = min(best, time.perf_counter() - started)
    gpus = {p["name"]: p["gpus"] for p in c["pods"]}
    gone = sorted(e.pod.name for e in result.evictions)
    return {
        "victims": len(gone),
        "victim_gpus": sum(gpus[name] for name in gone),
        "nominated": len(result.nominations),
        "bound": sum(len(g.bindings) for g in result.bindings),
        "pass_ms": round(best * 1000, 2),
    }


def summary(decided: list[dict[str, Any]], cases: list[dict[str, Any]]) -> dict[str, Any]:
    asked = {c["seed"]: c["asked"] for c in cases}
    served = [d for d in decided if d["victims"]]
    preempting = [d["pass_ms"] for d in served]
    return {
        "served": len(served),
        "bound_without_victims": sum(1 for d in decided if d["bound"] and not d["victims"]),
        "neither": sum(1 for d in decided if not d["bound"] and not d["victims"]),
        "victims": sum(d["victims"] for d in served),
        "victim_gpus_per_gpu_asked": round(
            sum(d["victim_gpus"] for d in served) / max(sum(asked[d["seed"]] for d in served), 1),
            3,
        ),
        "median_pass_ms_preempting": round(statistics.median(preempting), 2)
        if preempting
        else None,
        "p90_pass_ms_preempting": (
            round(statistics.quantiles(preempting, n=10)[-1], 2) if len(preempting) > 1 else None
        ),
    }


def markdown(results: dict[str, Any]) -> str:
    dra, ext = results["dra"], results["extended"]
    rows = [
        [label, dra[key], ext[key]]
        for label, key in (
            ("cases where the gang found victims", "served"),
            ("cases where it fit without any", "bound_without_victims"),
            ("cases where it neither fit nor found victims", "neither"),
            ("victim pods, in all", "victims"),
            ("victim GPUs per GPU asked", "victim_gpus_per_gpu_asked"),
            ("median pass ms, where it preempted", "median_pass_ms_preempting"),
            ("p90 pass ms, where it preempted", "p90_pass_ms_preempting"),
        )
    ]
    return "\n".join(
        [
            f"# Preemption for GPUs, DRA against extended resources (`python -m "
            f"bench.victims_gpus`, {results['machine']})",
            "",
            f"{results['cases']} seeded cases (seeds {results['seeds']}): 16 to 64 nodes of "
            f"{NODE_GPUS} GPUs filled to about 95% by running gangs of priority 0 to 3, and a "
            "waiting gang at priority 10; the same cases with the GPUs as ResourceClaims on "
            f"ResourceSlices' devices (DRA) and as `{EXTENDED}` (extended resources); one pass, "
            f"the best of three. Build: {results['build']}.",
            "",
            *table(["", "DRA", "extended resources"], rows),
            "",
            f"Where both preempted ({results['both']} cases), the same victims in "
            f"{results['same_victims']}; the DRA pass took {results['ratio_median']}x the "
            "extended-resource pass's time (median of the per-case ratios).",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.victims_gpus", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1, help="case i uses seed SEED+i")
    parser.add_argument("--name", default="victims-gpus", help="bench/results/NAME.{json,md}")
    args = parser.parse_args(argv)
    cases = [case(args.seed + i) for i in range(args.cases)]
    selectors = Selectors()
    log(f"{len(cases)} cases")
    dra, ext = [], []
    for c in cases:  # case by case, so that the machine's load weighs on both alike
        dra.append({"seed": c["seed"], **decide(c, extended=False, selectors=selectors)})
        ext.append({"seed": c["seed"], **decide(c, extended=True, selectors=selectors)})
    both = [(a, b) for a, b in zip(dra, ext, strict=True) if a["victims"] and b["victims"]]
    ratios = [a["pass_ms"] / b["pass_ms"] for a, b in both if b["pass_ms"]]
    build = subprocess.run(
        ["git", "log", "-1", "--format=%h %s"], capture_output=True, text=True, check=False
    ).stdout.strip()
    results = {
        "cases": len(cases),
        "seeds": f"{args.seed} to {args.seed + args.cases - 1}",
        "machine": f"{os.cpu_count()} cores",
        "build": build,
        "dra": summary(dra, cases),
        "extended": summary(ext, cases),
        "both": len(both),
        "same_victims": sum(1 for a, b in both if a["victims"] == b["victims"]),
        "ratio_median": round(statistics.median(ratios), 2) if ratios else None,
        "per_case": [
            {"seed": a["seed"], "dra": a, "extended": b} for a, b in zip(dra, ext, strict=True)
        ],
    }
    write(args.name, results, markdown(results), quiet=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
