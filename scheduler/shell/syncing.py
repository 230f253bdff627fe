"""Knowing when the watches have delivered the whole cluster, before the first pass.

A scheduler that decides on half a cluster double-books nodes it has not heard of yet, or
takes a half-bound gang for a new one. So the loop starts only once every informer's first
LIST is in the cache, and every labelled ConfigMap a fresh LIST shows has come through its
watch (an object deleted between the LIST and its watch never comes: that LIST is repeated
now and then, and what is gone is no longer waited for). Here too: the kinds' LISTs, and
how a LIST is folded into the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

import structlog

from scheduler.cache.cluster import QUEUES, ClusterCache
from scheduler.codecs.devices import (
    device_class_from_dict,
    resource_claim_from_dict,
    slice_from_dict,
)
from scheduler.codecs.objects import (
    budget_from_dict,
    claim_from_dict,
    namespace_from_dict,
    node_from_dict,
    pod_from_dict,
    podgroup_of,
    priority_class_from_dict,
    storage_class_from_dict,
    volume_from_dict,
)
from scheduler.codecs.owners import owner_from_dict
from scheduler.codecs.queues import queue_from_dict, queue_status_from_dict
from scheduler.model.owners import OwnerKind
from scheduler.model.pods import GangKey, PodGroupApi
from scheduler.model.queues import QUEUE_API
from scheduler.shell.api import ApiClient, ApiError

log = structlog.get_logger()

# Where each owner kind is listed: the versions the operators serve (JobSet v0.10,
# LeaderWorkerSet v0.7, KubeRay v1.5, MPI Operator v0.6, training-operator v1.8).
OWNER_PATHS = {
    OwnerKind.JOB: "/apis/batch/v1/jobs",
    OwnerKind.JOBSET: "/apis/jobset.x-k8s.io/v1alpha2/jobsets",
    OwnerKind.LEADER_WORKER_SET: "/apis/leaderworkerset.x-k8s.io/v1/leaderworkersets",
    OwnerKind.RAY_CLUSTER: "/apis/ray.io/v1/rayclusters",
    OwnerKind.MPI_JOB: "/apis/kubeflow.org/v2beta1/mpijobs",
    OwnerKind.PYTORCH_JOB: "/apis/kubeflow.org/v1/pytorchjobs",
    OwnerKind.SPARK_APPLICATION: "/apis/sparkoperator.k8s.io/v1beta2/sparkapplications",
}
# The owner kinds by the name the cache knows them by.
OWNER_KINDS = {kind.kind: kind for kind in OwnerKind}

LISTS = {
    "pods": "/api/v1/pods",
    "nodes": "/api/v1/nodes",
    **{api.kind: f"/apis/{api.value}/podgroups" for api in PodGroupApi},
    "priorityclasses": "/apis/scheduling.k8s.io/v1/priorityclasses",
    "namespaces": "/api/v1/namespaces",
    "persistentvolumeclaims": "/api/v1/persistentvolumeclaims",
    "persistentvolumes": "/api/v1/persistentvolumes",
    "storageclasses": "/apis/storage.k8s.io/v1/storageclasses",
    "poddisruptionbudgets": "/apis/policy/v1/poddisruptionbudgets",
    # Dynamic resource allocation (#24): devices, their classes, and the claims for them.
    "resourceslices": "/apis/resource.k8s.io/v1/resourceslices",
    "deviceclasses": "/apis/resource.k8s.io/v1/deviceclasses",
    "resourceclaims": "/apis/resource.k8s.io/v1/resourceclaims",
    # Volcano's Queues (#22): teams' quotas and shares; without the CRD, no queues.
    QUEUES: f"/apis/{QUEUE_API}/queues",
    # The owners that make gangs of pods that declare none (gangs from owners).
    **{kind.kind: path for kind, path in OWNER_PATHS.items()},
    # Seed 004's ConfigMaps, by label: a topology-placed gang must not be placed on a tree
    # that has not arrived yet.
    "topologies": "/api/v1/configmaps?labelSelector=sakkara.topology",
    "groups": "/api/v1/configmaps?labelSelector=sakkara.group",
}


# Only names and uids are needed here: metadata-only lists are a fraction of the size.
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def key_of(kind: str, obj: dict) -> str:
    meta = obj["metadata"]
    if kind == "pods":
        return meta["uid"]
    namespaced = (
        "topologies",
        "groups",
        "persistentvolumeclaims",
        "poddisruptionbudgets",
        "resourceclaims",
    )
    if kind in namespaced or kind in PODGROUP_KINDS or kind in OWNER_KINDS:
        return f"{meta['namespace']}/{meta['name']}"
    return meta["name"]


# The PodGroup kinds by the name the cache knows them by.
PODGROUP_KINDS = {api.kind: api for api in PodGroupApi}
# Kinds a cluster may not serve (their CRDs not installed): a 404 lists them empty.
# An API server older than 1.34 serves no resource.k8s.io/v1: no devices, as before #24.
DEVICE_KINDS = ("resourceslices", "deviceclasses", "resourceclaims")
OPTIONAL_KINDS = frozenset({*PODGROUP_KINDS, *OWNER_KINDS, QUEUES, *DEVICE_KINDS})


async def list_objects(
    api: ApiClient, kind: str, *, metadata_only: bool = False
) -> list[dict[str, Any]]:
    """Every object of a watched kind, paging through large lists; [] for a PodGroup kind
    the API server does not serve (its CRD not installed, v1alpha2 not enabled): the watch
    of such a kind delivers nothing, and the first sync must not wait for it."""
    items, _ = await list_versioned(api, kind, metadata_only=metadata_only)
    return items


async def list_versioned(
    api: ApiClient, kind: str, *, metadata_only: bool = False
) -> tuple[list[dict[str, Any]], str | None]:
    """``list_objects`` and the resourceVersion of the LIST, where a watch takes up; None
    for a PodGroup kind the API server does not serve (then no objects either)."""
    items: list[dict[str, Any]] = []

    async def keep(page: list[dict[str, Any]]) -> None:
        items.extend(page)

    version = await list_pages(api, kind, each=keep, metadata_only=metadata_only)
    return items, version


# Objects per page of a LIST. Pages are fetched while the last one is folded in.
PAGE_SIZE = 1000


async def list_pages(
    api: ApiClient,
    kind: str,
    *,
    each: Callable[[list[dict[str, Any]]], Awaitable[None]],
    metadata_only: bool = False,
) -> str | None:
    """Every page of a LIST of ``kind`` handed to ``each`` in turn; returns the LIST's
    resourceVersion, or None (and no pages) for a PodGroup kind the API server does not
    serve. The next page is asked for before ``each`` gets this one: the API server reads
    and encodes it while we decode and fold (``each`` should hand the event loop back now
    and then, so the request goes out). At start-up, 5,000 pods at 1,000 nodes, folding
    was a third of the LIST's time and waited for the last page."""
    accept = METADATA_ONLY if metadata_only else "application/json"
    query = "&" if "?" in LISTS[kind] else "?"

    async def fetch(token: str) -> dict[str, Any]:
        page = f"limit={PAGE_SIZE}&continue={token}" if token else f"limit={PAGE_SIZE}"
        return await api.request("GET", LISTS[kind] + query + page, accept=accept)

    following: asyncio.Future[dict[str, Any]] | None = asyncio.ensure_future(fetch(""))
    try:
        while following is not None:
            try:
                page = await following
            except ApiError as error:
                if error.status == 404 and kind in OPTIONAL_KINDS:
                    return None
                if error.status == 403 and (
                    kind in OWNER_KINDS or kind == QUEUES or kind in DEVICE_KINDS
                ):
                    return None  # not ours to read: placed as if it did not exist
                raise
            meta = page.get("metadata") or {}
            token = meta.get("continue", "")
            # Every page of a LIST is read at the first page's resourceVersion.
            following = asyncio.ensure_future(fetch(token)) if token else None
            await each(page.get("items") or [])
        return str(meta.get("resourceVersion") or "")
    finally:  # failed or cancelled (a shutdown) while a page was asked for: not left behind
        if following is not None and not following.done():
            following.cancel()
            with contextlib.suppress(BaseException):
                await following


async def list_keys(api: ApiClient, *, skip: Collection[str] = ()) -> set[tuple[str, str]]:
    """Every object of the watched kinds but ``skip``, as (kind, key). The kinds are listed
    at once: one after the other, the 16 round trips were most of the first sync on a
    small cluster, and they stand between the start and the first bind."""
    kinds = [kind for kind in LISTS if kind not in skip]
    lists = await asyncio.gather(*(list_objects(api, kind, metadata_only=True) for kind in kinds))
    return {
        (kind, key_of(kind, item))
        for kind, items in zip(kinds, lists, strict=True)
        for item in items
    }


async def wait_until_synced(
    api: ApiClient,
    cache: ClusterCache,
    *,
    relist_seconds: float = 5.0,
    stall_seconds: float = 15.0,
    listed: Mapping[str, asyncio.Event] | None = None,
) -> None:
    """Wait until the watches delivered every object a LIST shows. Raises TimeoutError if
    a kind has objects but not one of them came through in ``stall_seconds`` while the
    API server answers: its watch never started, so the process must be restarted,
    sooner than the caller's overall limit (kopf, which watched the kinds until #13,
    resolved them once and could miss some for good). The kinds in ``listed`` are
    watched by our own informers, whose first LIST is the cache's: their event says when
    it is folded in, and they are not listed a second time here."""
    listed = listed or {}
    started = time.monotonic()
    expected = await list_keys(api, skip=listed)
    relisted = time.monotonic()
    while missing := cache.unseen(expected):
        # Checked every 10 ms (the pass waits on it), but only recounted once the watches
        # delivered more: a set difference of the whole cluster is not free.
        checked = cache.delivered
        while cache.delivered == checked and time.monotonic() - relisted <= relist_seconds:
            await asyncio.sleep(0.01)
        if time.monotonic() - relisted > relist_seconds:
            expected &= await list_keys(api, skip=listed) | (expected - missing)
            relisted = time.monotonic()
            still = cache.unseen(expected)
            log.info("waiting for the watches", missing=len(still))
            dead = sorted({kind for kind, _ in still} - {kind for kind, _ in expected - still})
            if dead and relisted - started > stall_seconds:
                raise TimeoutError(
                    f"no {', '.join(dead)} came through the watches in "
                    f"{relisted - started:.0f}s although the API server lists them"
                )
    for event in listed.values():
        await event.wait()
    cache.stop_tracking()
    log.info(
        "cache synced; scheduling starts",
        objects=len(expected),
        seconds=round(time.monotonic() - started, 2),
    )


# The kinds the informers keep in the cache (the ConfigMaps' own watch re-lists correctly).
KINDS = (
    "pods",
    "nodes",
    *PODGROUP_KINDS,
    "priorityclasses",
    "namespaces",
    "persistentvolumeclaims",
    "persistentvolumes",
    "storageclasses",
    "poddisruptionbudgets",
    *DEVICE_KINDS,
    QUEUES,
    *OWNER_KINDS,
)


def remove(cache: ClusterCache, kind: str, key: str) -> None:
    if kind == "pods":
        cache.remove_pod(key)
    elif kind == "nodes":
        cache.remove_node(key)
    elif kind in PODGROUP_KINDS:
        namespace, name = key.split("/", 1)
        cache.remove_podgroup(GangKey(namespace, name), PODGROUP_KINDS[kind])
    elif kind == "priorityclasses":
        cache.remove_priority_class(key)
    elif kind == "namespaces":
        cache.remove_namespace(key)
    elif kind == "persistentvolumeclaims":
        cache.remove_claim(key)
    elif kind == "persistentvolumes":
        cache.remove_volume(key)
    elif kind == "storageclasses":
        cache.remove_storage_class(key)
    elif kind == "poddisruptionbudgets":
        cache.remove_budget(key)
    elif kind == "resourceslices":
        cache.remove_slice(key)
    elif kind == "deviceclasses":
        cache.remove_device_class(key)
    elif kind == "resourceclaims":
        cache.remove_resource_claim(key)
    elif kind in OWNER_KINDS:
        cache.remove_owner(OWNER_KINDS[kind], key)
    elif kind == QUEUES:
        cache.remove_queue(key)


# How a watched object is folded into the cache, per kind: by the watches and by a re-list.
UPSERTS: dict[str, Callable[[ClusterCache, Any], None]] = {
    "pods": lambda cache, body: cache.upsert_pod(pod_from_dict(body)),
    "nodes": lambda cache, body: cache.upsert_node(node_from_dict(body)),
    **{
        api.kind: lambda cache, body, _api=api: cache.upsert_podgroup(podgroup_of(_api, body))
        for api in PodGroupApi
    },
    "priorityclasses": lambda cache, body: cache.upsert_priority_class(
        priority_class_from_dict(body)
    ),
    "namespaces": lambda cache, body: cache.upsert_namespace(*namespace_from_dict(body)),
    "persistentvolumeclaims": lambda cache, body: cache.upsert_claim(claim_from_dict(body)),
    "persistentvolumes": lambda cache, body: cache.upsert_volume(volume_from_dict(body)),
    "storageclasses": lambda cache, body: cache.upsert_storage_class(
        *storage_class_from_dict(body)
    ),
    "poddisruptionbudgets": lambda cache, body: cache.upsert_budget(budget_from_dict(body)),
    "resourceslices": lambda cache, body: cache.upsert_slice(slice_from_dict(body)),
    "deviceclasses": lambda cache, body: cache.upsert_device_class(device_class_from_dict(body)),
    "resourceclaims": lambda cache, body: cache.upsert_resource_claim(
        resource_claim_from_dict(body)
    ),
    QUEUES: lambda cache, body: cache.upsert_queue(
        queue_from_dict(body), queue_status_from_dict(body)
    ),
    **{
        kind.kind: lambda cache, body, _kind=kind: cache.upsert_owner(owner_from_dict(_kind, body))
        for kind in OwnerKind
    },
}


def fold_listing(
    cache: ClusterCache, kind: str, items: list[dict[str, Any]], *, since: int
) -> list[str]:
    """Fold a whole LIST of ``kind`` into the cache (``Folding``, in one go). Returns the
    keys removed."""
    folding = Folding(cache, kind, since=since)
    folding.page(items)
    return folding.finish()


class Folding:
    """A LIST of ``kind`` begun when the cache had had ``since`` deliveries, folded into the
    cache page by page, as an informer's re-list does: take in every object no watch
    delivered since the LIST began (a bind that landed while the watch was away: placing on
    the room it took would overcommit the node), and, once the last page is in, drop
    whatever the LIST no longer shows (a re-list delivers what exists, never a DELETED for
    what does not any more). A page folded before the last one leaves each object it holds
    at least as new as it was, so a pass in between sees nothing older than before."""

    def __init__(self, cache: ClusterCache, kind: str, *, since: int) -> None:
        self._cache, self._kind, self._since = cache, kind, since
        self._upsert = UPSERTS[kind]
        self._listed: set[str] = set()
        self._folded = 0

    def page(self, items: list[dict[str, Any]]) -> None:
        cache, kind, since, upsert = self._cache, self._kind, self._since, self._upsert
        for item in items:
            try:
                key = key_of(kind, item)
            except (KeyError, TypeError):
                log.warning("listed object without a name; ignored", kind=kind)
                continue
            self._listed.add(key)
            if cache.stale(kind, key, since=since):
                try:
                    upsert(cache, item)
                except Exception:  # a shape no codec foresaw: the watch's handler says so too
                    log.exception("listed object not folded in", kind=kind, key=key)
                    continue
                self._folded += 1

    def finish(self) -> list[str]:
        """After the last page: remove what vanished. Returns the keys removed."""
        cache, kind, since = self._cache, self._kind, self._since
        gone = cache.vanished(kind, self._listed, since=since)
        log.debug(
            "listing folded in",
            kind=kind,
            listed=len(self._listed),
            folded=self._folded,
            gone=len(gone),
        )
        for key in gone:
            remove(cache, kind, key)
        cache.prune(kind, since=since)
        if gone:
            log.info(
                "removed what vanished while the watch was away",
                kind=kind,
                count=len(gone),
                examples=gone[:5],
            )
        return gone
