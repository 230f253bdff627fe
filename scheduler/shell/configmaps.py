"""Sakkara's ConfigMaps into the cache: the topology (label ``sakkara.topology``, in the
topology namespace only) and Sakkara groups (label ``sakkara.group``, anywhere).

Used by the label-selected watches (``shell.watching``: an object whose label is removed
arrives as deleted) and by ``explain`` on a fresh LIST.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from scheduler.cache import kinds
from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.shapes import obj, text, texts
from scheduler.codecs.topology import group_from_configmap, topology_from_configmap
from scheduler.model import names

log = structlog.get_logger()


def apply_configmap(
    cache: ClusterCache,
    body: Mapping[str, Any],
    *,
    deleted: bool = False,
    topology_namespace: str,
) -> None:
    meta = obj(body.get("metadata"))
    labels = texts(meta.get("labels"))
    namespace, name = text(meta.get("namespace")), text(meta.get("name"))
    if not namespace or not name:
        log.warning("ConfigMap without a namespace and a name ignored", metadata=str(meta)[:200])
        return
    key = f"{namespace}/{name}"
    if names.SAKKARA_GROUP in labels and not deleted:
        cache.upsert(kinds.GROUPS, group_from_configmap(body), key=key)
    else:
        cache.remove(kinds.GROUPS, key)
    if names.SAKKARA_TOPOLOGY not in labels:
        cache.remove(kinds.TOPOLOGIES, key)
        return
    cache.seen(kinds.TOPOLOGIES.name, key)
    if deleted or namespace != topology_namespace:
        cache.remove(kinds.TOPOLOGIES, key)
        if not deleted:
            log.warning(
                "topology ConfigMap outside --topology-namespace is ignored",
                configmap=key,
                topology_namespace=topology_namespace,
            )
        return
    topology, errors = topology_from_configmap(obj(body.get("data")))
    for problem in errors:
        log.error("topology ConfigMap cannot be used", configmap=key, problem=problem)
    for warning in topology.warnings if topology else ():
        log.warning("topology ConfigMap", configmap=key, warning=warning)
    cache.upsert(kinds.TOPOLOGIES, (topology, tuple(f"{key}: {e}" for e in errors)), key=key)
