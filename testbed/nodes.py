"""Fake nodes for the local control plane, laid out as a topology tree.

Every node is a plain Node object annotated for KWOK, which marks it Ready and moves pods
bound to it to Running; there is no kubelet and no container. Each node is labelled with its
place in the tree, and the matching topology ConfigMap (the format of Sakkara, seed 004) can
be written beside it, so a scheduler can read the topology from either.

    python -m testbed.nodes --racks 4 --nodes-per-rack 8 --cpu 32 --memory 128Gi --gpu 8 \\
        --topology gang-scheduler-system/cluster-topology
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pykube
import requests

from testbed.cluster import DEFAULT_DIR, KWOK_NODE_ANNOTATION
from testbed.rest import is_ready

# The label that says which level unit a node sits in, per level name.
LEVEL_LABELS = {
    "zone": "topology.kubernetes.io/zone",
    "rack": "gang-scheduler.io/rack",
}
FAKE_NODE_LABEL = ("gang-scheduler.io/fake-node", "true")
TOPOLOGY_LABEL = "sakkara.topology"
GPU = "nvidia.com/gpu"


@dataclass(frozen=True)
class FakeNode:
    name: str
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Layout:
    """Nodes and the tree they form: ``levels`` top to bottom, ending with ``node``."""

    levels: tuple[str, ...]
    tree: dict
    nodes: tuple[FakeNode, ...]


def layout(*, racks: int, nodes_per_rack: int, zones: int = 0, prefix: str = "node-") -> Layout:
    """Number nodes ``node-0 …`` rack by rack, racks ``rack-0 …``, zones ``zone-0 …``.

    With ``zones``, racks are split into that many zones of equal size.
    """
    if racks < 1 or nodes_per_rack < 1:
        raise ValueError("--racks and --nodes-per-rack must be at least 1")
    if zones < 0 or (zones and racks % zones):
        raise ValueError(f"--racks ({racks}) must be a multiple of --zones ({zones})")
    racks_per_zone = racks // zones if zones else racks
    tree: dict = {}
    nodes: list[FakeNode] = []
    for r in range(racks):
        rack = f"rack-{r}"
        labels = {LEVEL_LABELS["rack"]: rack}
        parent = tree
        if zones:
            zone = f"zone-{r // racks_per_zone}"
            labels[LEVEL_LABELS["zone"]] = zone
            parent = tree.setdefault(zone, {})
        rack_tree = parent.setdefault(rack, {})
        for n in range(nodes_per_rack):
            name = f"{prefix}{r * nodes_per_rack + n}"
            rack_tree[name] = {}
            nodes.append(FakeNode(name=name, labels=dict(labels)))
    levels = ("zone", "rack", "node") if zones else ("rack", "node")
    return Layout(levels=levels, tree=tree, nodes=tuple(nodes))


def node_manifest(
    node: FakeNode,
    *,
    cpu: str,
    memory: str,
    gpu: int = 0,
    pods: int = 110,
    extended: dict[str, str] | None = None,
) -> dict:
    """A Node object that KWOK will manage, with the given allocatable resources
    (``extended``: more of them, by name)."""
    resources = {"cpu": cpu, "memory": memory, "pods": str(pods), **(extended or {})}
    if gpu:
        resources[GPU] = str(gpu)
    key, value = KWOK_NODE_ANNOTATION
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "annotations": {key: value, "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": node.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                FAKE_NODE_LABEL[0]: FAKE_NODE_LABEL[1],
                **node.labels,
            },
        },
        "status": {"allocatable": dict(resources), "capacity": dict(resources)},
    }


# Dynamic resource allocation (#24): the fake GPU driver whose devices tests publish.
GPU_DRIVER = "gpu.example.com"
DOMAIN_DRIVER = "domain.example.com"  # a multi-node NVLink domain's channel (ComputeDomain-like)


def gpu_slice(
    node: str,
    *,
    gpus: int = 8,
    nvlink_domain: str = "",
    product: str = "NVIDIA H100 80GB HBM3",
    memory: str = "80Gi",
    labels: dict[str, str] | None = None,
) -> dict:
    """The ResourceSlice a GPU driver publishes for ``node``: ``gpus`` devices ``gpu-0 …``
    with ``index``, ``uuid``, ``productName`` and ``memory`` capacity, and the NVLink domain
    the node's rack shares (``nvlinkDomain``), as NVIDIA's DRA driver publishes them."""
    devices = []
    for i in range(gpus):
        attributes: dict = {
            "index": {"int": i},
            "uuid": {"string": f"GPU-{node}-{i:02d}"},
            "productName": {"string": product},
            "driverVersion": {"version": "570.124.6"},
        }
        if nvlink_domain:
            attributes["nvlinkDomain"] = {"string": nvlink_domain}
        devices.append(
            {
                "name": f"gpu-{i}",
                "attributes": attributes,
                "capacity": {"memory": {"value": memory}},
            }
        )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{GPU_DRIVER}", "labels": dict(labels or {})},
        "spec": {
            "driver": GPU_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def domain_slice(
    domain: str, *, node_labels: dict[str, str], labels: dict[str, str] | None = None
) -> dict:
    """One network-attached channel device of an NVLink domain, reachable from the nodes
    with ``node_labels``: a claim shared by a gang's pods for it puts them all in the domain."""
    expressions = [
        {"key": key, "operator": "In", "values": [value]}
        for key, value in sorted(node_labels.items())
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{domain}-{DOMAIN_DRIVER}", "labels": dict(labels or {})},
        "spec": {
            "driver": DOMAIN_DRIVER,
            "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": expressions}]},
            "pool": {"name": domain, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "channel", "attributes": {"domain": {"string": domain}}}],
        },
    }


def device_class(
    name: str, driver: str = GPU_DRIVER, *, labels: dict[str, str] | None = None
) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    }


def topology_configmap(
    plan: Layout, *, namespace: str, name: str, resource_names: Iterable[str]
) -> dict:
    """The ConfigMap that describes ``plan`` in seed 004's format."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {TOPOLOGY_LABEL: ""}},
        "data": {
            "name": name,
            "resource-names": json.dumps(list(resource_names)),
            "level-names": json.dumps(list(plan.levels)),
            "tree": json.dumps(plan.tree, indent=2),
        },
    }


def api_client(kubeconfig: Path | None = None) -> pykube.HTTPClient:
    path = kubeconfig or Path(os.environ.get("KUBECONFIG") or DEFAULT_DIR / "kubeconfig")
    if not path.is_file():
        raise SystemExit(
            f"error: no kubeconfig at {path}; start the local control plane with "
            "`make cluster-up`, or pass --kubeconfig"
        )
    return pykube.HTTPClient(pykube.KubeConfig.from_file(str(path)))


def _create(api: pykube.HTTPClient, kind: type[pykube.objects.APIObject], obj: dict) -> bool:
    """Create ``obj``; False if it already exists."""
    try:
        kind(api, obj).create()
    except pykube.exceptions.HTTPError as error:
        if error.code == 409:
            return False
        raise
    return True


def create_nodes(api: pykube.HTTPClient, manifests: list[dict], *, workers: int = 8) -> int:
    """Create the nodes concurrently; returns how many were new."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return sum(pool.map(lambda m: _create(api, pykube.Node, m), manifests))


def wait_ready(api: pykube.HTTPClient, count: int, *, timeout: float = 300.0) -> None:
    """Until ``count`` fake nodes report Ready (one LIST a second, not a watch per node)."""
    deadline = time.monotonic() + timeout
    selector = {FAKE_NODE_LABEL[0]: FAKE_NODE_LABEL[1]}
    while True:
        ready = sum(
            1 for n in pykube.Node.objects(api).filter(selector=selector) if is_ready(n.obj)
        )
        if ready >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {ready} of {count} fake nodes Ready after {timeout:.0f}s")
        time.sleep(1)


def write_topology(api: pykube.HTTPClient, configmap: dict) -> None:
    """Create or replace the topology ConfigMap, creating its namespace if needed."""
    namespace = configmap["metadata"]["namespace"]
    _create(
        api,
        pykube.Namespace,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )
    if not _create(api, pykube.ConfigMap, configmap):
        existing = pykube.ConfigMap.objects(api, namespace=namespace).get(
            name=configmap["metadata"]["name"]
        )
        existing.obj["data"] = configmap["data"]
        existing.obj["metadata"].setdefault("labels", {}).update(configmap["metadata"]["labels"])
        existing.update()


def delete_fake_nodes(api: pykube.HTTPClient) -> int:
    selector = {FAKE_NODE_LABEL[0]: FAKE_NODE_LABEL[1]}
    nodes = list(pykube.Node.objects(api).filter(selector=selector))
    for node in nodes:
        node.delete()
    return len(nodes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testbed.nodes", description="Create KWOK fake nodes laid out in racks."
    )
    parser.add_argument("--racks", type=int, default=2)
    parser.add_argument("--nodes-per-rack", type=int, default=4)
    parser.add_argument("--zones", type=int, default=0, help="split the racks into zones")
    parser.add_argument("--prefix", default="node-", help="node names are PREFIX0, PREFIX1, ...")
    parser.add_argument("--cpu", default="32", help="allocatable cpu per node")
    parser.add_argument("--memory", default="128Gi", help="allocatable memory per node")
    parser.add_argument("--gpu", type=int, default=0, help=f"allocatable {GPU} per node")
    parser.add_argument("--pods", type=int, default=110, help="allocatable pods per node")
    parser.add_argument(
        "--topology",
        metavar="NAMESPACE/NAME",
        help="also write the topology ConfigMap (label sakkara.topology) there",
    )
    parser.add_argument(
        "--kubeconfig", type=Path, help="default: $KUBECONFIG, else .cluster/kubeconfig"
    )
    parser.add_argument("--delete", action="store_true", help="delete every fake node instead")
    args = parser.parse_args(argv)

    api = api_client(args.kubeconfig)
    try:
        if args.delete:
            print(f"deleted {delete_fake_nodes(api)} fake nodes")
            return 0
        try:
            plan = layout(
                racks=args.racks,
                nodes_per_rack=args.nodes_per_rack,
                zones=args.zones,
                prefix=args.prefix,
            )
        except ValueError as error:
            parser.error(str(error))
        manifests = [
            node_manifest(n, cpu=args.cpu, memory=args.memory, gpu=args.gpu, pods=args.pods)
            for n in plan.nodes
        ]
        created = create_nodes(api, manifests)
        print(f"{created} nodes created, {len(manifests) - created} already there")
        if args.topology:
            namespace, _, name = args.topology.rpartition("/")
            if not namespace or not name:
                parser.error("--topology takes NAMESPACE/NAME")
            resources = ["cpu", "memory"] + ([GPU] if args.gpu else [])
            write_topology(
                api,
                topology_configmap(plan, namespace=namespace, name=name, resource_names=resources),
            )
            print(
                f"topology ConfigMap {namespace}/{name} written (levels {', '.join(plan.levels)})"
            )
    except (pykube.exceptions.HTTPError, requests.RequestException) as error:
        print(f"error: the API server refused: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
