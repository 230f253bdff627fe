"""A scheduling pass with GPUs as DRA devices against the same pass with GPUs as an extended
resource (#24): the core alone, in pure Python, on the same cluster and the same gangs.

The workload (defaults; every size has a flag):

* 1,000 nodes of 64 cpu and 8 GPUs, in racks of 8 that share an NVLink domain. As DRA: one
  ResourceSlice per node with 8 devices (``index``, ``uuid``, ``productName``,
  ``nvlinkDomain``, ``memory``); as an extended resource: ``nvidia.com/gpu: 8``.
* 5,000 bound pods, 5 a node, each holding 1 GPU: as DRA, a ResourceClaim allocated to one
  device of its node and reserved for it.
* Waiting gangs of 8, 16, 32 and 64 members (in turn), each member asking 2 GPUs: as DRA,
  one claim with a CEL selector on ``productName`` and a ``matchAttribute`` constraint on
  ``nvlinkDomain``; as an extended resource, ``nvidia.com/gpu: 2``. With 3 GPUs free a node
  every member takes a node of its own: the first gangs fit, and then an unfittable one
  (``--unfit`` members, more than the nodes left) fails, the expensive way to fail.

Each variant runs ``--rounds`` times (interleaved); the figure is the median pass time, and
the ratio DRA / extended resource of the medians. The run fails, and writes nothing, unless
both variants bind the same gangs whole and the DRA one never gives a device twice.

    python -m bench.dra
    python -m bench.dra --nodes 200 --bound 1000 --gangs 8
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import report
from scheduler.codecs.cel import Selectors
from scheduler.codecs.devices import (
    device_class_from_dict,
    resource_claim_from_dict,
    slice_from_dict,
)
from scheduler.codecs.objects import node_from_dict, pod_from_dict
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.decisions import Result
from scheduler.model.snapshot import Snapshot
from scheduler.model.times import format_time

DRIVER = "gpu.nvidia.com"
SCHEDULER = "gang-scheduler"
T0 = 1_800_000_000.0
GPUS = 8
RACK = 8
SIZES = (8, 16, 32, 64)
SELECTOR = 'device.attributes["gpu.nvidia.com"].productName == "H100"'
TARGET_RATIO = 2.0


def _node(i: int, *, dra: bool) -> dict[str, Any]:
    allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if not dra:
        allocatable["nvidia.com/gpu"] = str(GPUS)
    return {
        "metadata": {"name": f"n{i}", "labels": {"rack": f"r{i // RACK}"}},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _slice(i: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"n{i}-gpus"},
        "spec": {
            "driver": DRIVER,
            "nodeName": f"n{i}",
            "pool": {"name": f"n{i}", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{g}",
                    "attributes": {
                        "index": {"int": g},
                        "uuid": {"string": f"GPU-{i}-{g}"},
                        "productName": {"string": "H100"},
                        "nvlinkDomain": {"string": f"r{i // RACK}"},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for g in range(GPUS)
            ],
        },
    }


def _pod(
    name: str, *, gpus: int, dra: bool, node: str = "", gang: tuple[str, int] | None = None
) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": "4", "memory": "16Gi"}
    if not dra:
        requests["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER,
        "containers": [{"name": "main", "resources": {"requests": requests}}],
    }
    annotations = {}
    if gang is not None:
        annotations = {names.KOORD_NAME: gang[0], names.KOORD_MIN_AVAILABLE: str(gang[1])}
    if node:
        spec["nodeName"] = node
    if dra:
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimName": f"{name}-gpus"}]
    return {
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": f"uid-{name}",
            "annotations": annotations,
            "creationTimestamp": format_time(T0 - 100),
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def _claim(name: str, *, gpus: int, held: tuple[str, str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {
            "name": f"{name}-gpus",
            "namespace": "bench",
            "uid": f"c-{name}",
            "resourceVersion": "1",
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {
                            "deviceClassName": DRIVER,
                            "count": gpus,
                            "selectors": [{"cel": {"expression": SELECTOR}}],
                        },
                    }
                ],
                "constraints": [{"matchAttribute": f"{DRIVER}/nvlinkDomain"}],
            }
        },
    }
    if held is not None:
        node, device = held
        body["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpus", "driver": DRIVER, "pool": node, "device": device}
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": name, "uid": f"uid-{name}"}],
        }
    return body


def world(
    *, nodes: int, bound: int, gangs: int, unfit: int, dra: bool, selectors: Selectors
) -> Snapshot:
    node_objs = {n.name: n for n in (node_from_dict(_node(i, dra=dra)) for i in range(nodes))}
    pods, claims = [], []
    per_node = max(bound // nodes, 0)
    for i in range(nodes):
        for k in range(per_node):
            name = f"b{i}-{k}"
            pods.append(pod_from_dict(_pod(name, gpus=1, dra=dra, node=f"n{i}")))
            if dra:
                claims.append(_claim(name, gpus=1, held=(f"n{i}", f"gpu-{k}")))
    for g in range(gangs):
        size = SIZES[g % len(SIZES)]
        for m in range(size):
            name = f"g{g}-{m}"
            pods.append(pod_from_dict(_pod(name, gpus=2, dra=dra, gang=(f"g{g}", size))))
            if dra:
                claims.append(_claim(name, gpus=2))
    for m in range(unfit):
        name = f"big-{m}"
        pods.append(pod_from_dict(_pod(name, gpus=2, dra=dra, gang=("big", unfit))))
        if dra:
            claims.append(_claim(name, gpus=2))
    snap = Snapshot(nodes=node_objs, pods=tuple(pods))
    if not dra:
        return snap
    decoded = [resource_claim_from_dict(c) for c in claims]
    gpu_class = device_class_from_dict(
        {
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    )
    return replace(
        snap,
        resource_slices=tuple(slice_from_dict(_slice(i)) for i in range(nodes)),
        device_classes={DRIVER: gpu_class},
        resource_claims={c.key: c for c in decoded},
        selectors=selectors.evaluate,
    )


class BenchError(Exception):
    pass


def _bound_gangs(result: Result) -> list[str]:
    return sorted(g.gang.name for group in result.bindings for g in group.gangs)


def _check(result: Result, snap: Snapshot) -> None:
    """No device given twice, and every allocation on the node its pod is bound to."""
    seen: set[object] = set()
    for claim in snap.resource_claims.values():
        if claim.allocation is not None:
            seen.update(claim.allocation.devices)
    for group in result.bindings:
        nodes = {b.pod: b.node for b in group.bindings}
        for write in group.claims:
            if write.allocation is None:
                continue
            for device in write.allocation.devices:
                if device in seen:
                    raise BenchError(f"device {device} given twice")
                seen.add(device)
                if device.pool != nodes[write.pods[0]]:
                    raise BenchError(f"{write.name} allocated on {device.pool}, bound elsewhere")


def run(*, nodes: int, bound: int, gangs: int, unfit: int, rounds: int) -> dict[str, Any]:
    """Both variants, ``rounds`` times interleaved. With 5 GPUs bound a node (``bound`` =
    5 x ``nodes``), every member of 2 GPUs takes a node: ``unfit`` > ``nodes`` never fits."""
    selectors = Selectors()
    snaps = {
        dra: world(nodes=nodes, bound=bound, gangs=gangs, unfit=unfit, dra=dra, selectors=selectors)
        for dra in (False, True)
    }
    times: dict[bool, list[float]] = {False: [], True: []}
    outcome: dict[bool, list[str]] = {}
    for r in range(rounds):
        for dra in (False, True) if r % 2 == 0 else (True, False):
            started = time.perf_counter()
            result = schedule(snaps[dra], now=T0)
            times[dra].append(time.perf_counter() - started)
            outcome[dra] = _bound_gangs(result)
            if dra:
                _check(result, snaps[dra])
    if outcome[True] != outcome[False]:
        raise BenchError(f"DRA bound {outcome[True]}, the extended resource {outcome[False]}")
    if "big" in outcome[True] or len(outcome[True]) != gangs:
        raise BenchError(f"expected the {gangs} gangs bound and not the big one: {outcome[True]}")
    median = {dra: statistics.median(t) for dra, t in times.items()}
    return {
        "nodes": nodes,
        "bound": bound,
        "gangs": gangs,
        "members": sum(SIZES[g % len(SIZES)] for g in range(gangs)),
        "unfit": unfit,
        "rounds": rounds,
        "extended_s": {"median": median[False], "min": min(times[False]), "max": max(times[False])},
        "dra_s": {"median": median[True], "min": min(times[True]), "max": max(times[True])},
        "ratio": median[True] / median[False],
        "target_ratio": TARGET_RATIO,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def _ms(figures: dict[str, float]) -> str:
    low, mid, high = (figures[k] * 1000 for k in ("min", "median", "max"))
    return f"{mid:.0f} ms ({low:.0f}-{high:.0f})"


def markdown(r: dict[str, Any]) -> str:
    ok = "met" if r["ratio"] <= r["target_ratio"] else "MISSED"
    ext, dra = r["extended_s"], r["dra_s"]
    rows = [["extended resource", _ms(ext)], ["DRA devices", _ms(dra)]]
    return "\n".join(
        [
            "# A pass with GPUs as DRA devices vs as an extended resource (bench/dra.py)",
            "",
            f"{r['nodes']} nodes of 8 GPUs, {r['bound']} bound pods holding a GPU each, "
            f"{r['gangs']} gangs ({r['members']} members, 2 GPUs each, a CEL selector and a "
            f"matchAttribute constraint as DRA) that fit, then one of {r['unfit']} that does "
            f"not. One pass each, {r['rounds']} rounds interleaved; median (min-max).",
            "",
            *report.table(["GPUs as", "pass"], rows),
            "",
            f"DRA / extended resource: **{r['ratio']:.2f}x** "
            f"(target at most {r['target_ratio']:.0f}x: {ok}).",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--bound", type=int, default=5000)
    parser.add_argument("--gangs", type=int, default=12)
    parser.add_argument(
        "--unfit",
        type=int,
        default=0,
        help="members of the gang that cannot fit (default: nodes+1)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(report.RESULTS))
    args = parser.parse_args(argv)
    unfit = args.unfit or args.nodes + 1
    try:
        result = run(
            nodes=args.nodes, bound=args.bound, gangs=args.gangs, unfit=unfit, rounds=args.rounds
        )
    except BenchError as error:
        print(f"bench failed: {error}", file=sys.stderr)
        return 1
    report.write("dra", result, markdown(result), into=Path(args.out), quiet=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
