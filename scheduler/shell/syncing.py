"""Knowing when the watches have delivered the whole cluster, before the first pass.

A scheduler that decides on half a cluster double-books nodes it has not heard of yet, or
takes a half-bound gang for a new one. So the loop starts only after every object that a
fresh LIST shows has come through the watches. An object deleted between the LIST and its
watch never comes: the LIST is repeated now and then, and what is gone is no longer waited
for.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog

from scheduler.cache.cluster import ClusterCache
from scheduler.shell.api import ApiClient, ApiError

log = structlog.get_logger()

LISTS = {
    "pods": "/api/v1/pods",
    "nodes": "/api/v1/nodes",
    "podgroups": "/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
    "priorityclasses": "/apis/scheduling.k8s.io/v1/priorityclasses",
    # Seed 004's ConfigMaps, by label: a topology-placed gang must not be placed on a tree
    # that has not arrived yet.
    "topologies": "/api/v1/configmaps?labelSelector=sakkara.topology",
    "groups": "/api/v1/configmaps?labelSelector=sakkara.group",
}


# Only names and uids are needed here: metadata-only lists are a fraction of the size.
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def _key(kind: str, obj: dict) -> str:
    meta = obj["metadata"]
    if kind == "pods":
        return meta["uid"]
    if kind in ("podgroups", "topologies", "groups"):
        return f"{meta['namespace']}/{meta['name']}"
    return meta["name"]


async def list_objects(
    api: ApiClient, kind: str, *, metadata_only: bool = False
) -> list[dict[str, Any]]:
    """Every object of a watched kind, paging through large lists; [] for the PodGroup kind
    if its CRD is not installed."""
    items: list[dict[str, Any]] = []
    token = ""
    accept = METADATA_ONLY if metadata_only else "application/json"
    while True:
        query = "&" if "?" in LISTS[kind] else "?"
        query += f"limit=1000&continue={token}" if token else "limit=1000"
        try:
            page = await api.request("GET", LISTS[kind] + query, accept=accept)
        except ApiError as error:
            if error.status == 404 and kind == "podgroups":
                log.warning("the PodGroup CRD is not installed; kubectl apply -f crds/")
                return items
            raise
        items.extend(page.get("items") or ())
        token = (page.get("metadata") or {}).get("continue", "")
        if not token:
            return items


async def list_keys(api: ApiClient) -> set[tuple[str, str]]:
    """Every object of the watched kinds, as (kind, key)."""
    keys: set[tuple[str, str]] = set()
    for kind in LISTS:
        items = await list_objects(api, kind, metadata_only=True)
        keys.update((kind, _key(kind, item)) for item in items)
    return keys


async def wait_until_synced(
    api: ApiClient, cache: ClusterCache, *, relist_seconds: float = 5.0
) -> None:
    started = time.monotonic()
    expected = await list_keys(api)
    relisted = time.monotonic()
    while missing := cache.unseen(expected):
        if time.monotonic() - relisted > relist_seconds:
            expected &= await list_keys(api) | (expected - missing)
            relisted = time.monotonic()
            log.info("waiting for the watches", missing=len(cache.unseen(expected)))
            continue
        await asyncio.sleep(0.05)
    cache.stop_tracking()
    log.info(
        "cache synced; scheduling starts",
        objects=len(expected),
        seconds=round(time.monotonic() - started, 2),
    )
