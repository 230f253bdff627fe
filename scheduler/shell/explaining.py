"""``gang-scheduler explain`` and ``top``: a fresh snapshot from the API server, explained by
the core."""

from __future__ import annotations

import time

from scheduler.cache.cluster import QUEUES, ClusterCache
from scheduler.codecs.cel import Selectors
from scheduler.codecs.objects import (
    node_from_dict,
    pod_from_dict,
    podgroup_of,
    priority_class_from_dict,
)
from scheduler.core.explaining import explain, explain_cluster, top_lines, waiting_gangs
from scheduler.model.config import Config
from scheduler.model.pods import GangKey, PodGroupApi
from scheduler.model.snapshot import Snapshot
from scheduler.shell.api import ApiClient, Credentials
from scheduler.shell.configmaps import apply_configmap
from scheduler.shell.syncing import (
    DEVICE_KINDS,
    OWNER_KINDS,
    UPSERTS,
    list_objects,
    list_versioned,
)


async def explain_gang(
    credentials: Credentials,
    key: GangKey | None,
    *,
    config: Config,
    topology_namespace: str = "gang-scheduler-system",
    cluster: bool = False,
) -> list[str]:
    """What ``explain`` says of a gang (``key``), and with ``cluster`` of the cluster's free
    room (#26), computed on a fresh LIST of everything."""
    snapshot = await cluster_snapshot(
        credentials, config=config, topology_namespace=topology_namespace
    )
    said = explain(snapshot, key, now=time.time(), config=config) if key is not None else []
    return [*said, *(explain_cluster(snapshot, config=config) if cluster else [])]


async def top(
    credentials: Credentials, *, config: Config, topology_namespace: str = "gang-scheduler-system"
) -> list[str]:
    """``kubectl gang top`` (#26): every gang with members waiting, with its queue, how long
    it has waited and why, the longest waiting first."""
    snapshot = await cluster_snapshot(
        credentials, config=config, topology_namespace=topology_namespace
    )
    now = time.time()
    return top_lines(waiting_gangs(snapshot, now=now, config=config), now=now)


async def cluster_snapshot(
    credentials: Credentials, *, config: Config, topology_namespace: str
) -> Snapshot:
    """The cluster as the scheduler's cache would hold it, from a fresh LIST of every kind
    it watches (no informers: one look)."""
    api = ApiClient(credentials, connections=4)
    try:
        cache = ClusterCache(
            scheduler_name=config.scheduler_name,
            aliases=config.aliases,
            selectors=Selectors().evaluate,
        )
        for body in await list_objects(api, "nodes"):
            cache.upsert_node(node_from_dict(body))
        for body in await list_objects(api, "pods"):
            cache.upsert_pod(pod_from_dict(body))
        for kind in PodGroupApi:
            for body in await list_objects(api, kind.kind):
                cache.upsert_podgroup(podgroup_of(kind, body))
        for kind in OWNER_KINDS:  # the owners that make gangs of pods that declare none
            bodies, version = await list_versioned(api, kind)
            cache.serve(kind, version is not None)
            for body in bodies:
                UPSERTS[kind](cache, body)
        bodies, version = await list_versioned(api, QUEUES)  # Volcano's Queues (#22)
        cache.serve(QUEUES, version is not None)
        for body in bodies:
            UPSERTS[QUEUES](cache, body)
        for kind in DEVICE_KINDS:  # dynamic resource allocation (#24)
            for body in await list_objects(api, kind):
                UPSERTS[kind](cache, body)
        for body in await list_objects(api, "priorityclasses"):
            cache.upsert_priority_class(priority_class_from_dict(body))
        for kind in ("topologies", "groups"):
            for body in await list_objects(api, kind):
                apply_configmap(cache, body, topology_namespace=topology_namespace)
    finally:
        await api.close()
    return cache.snapshot(whole=True)
