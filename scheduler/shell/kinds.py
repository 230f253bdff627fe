"""Every kind the scheduler reads, described once: where it is listed and watched, how an
object of it is decoded and folded into the cache, how it leaves, and what its absence
means. The informers, the first sync, re-lists, ``explain`` and ``gang-scheduler snapshot``
all read this table; a new kind is one ``Watched`` here (and, if the cache only needs to
keep it, one ``Kind`` in ``cache/kinds.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from scheduler.cache import kinds
from scheduler.cache.cluster import QUEUES, ClusterCache
from scheduler.cache.kinds import Kind
from scheduler.codecs.devices import (
    device_class_from_dict,
    resource_claim_from_dict,
    slice_from_dict,
)
from scheduler.codecs.objects import (
    budget_from_dict,
    namespace_from_dict,
    node_from_dict,
    pod_from_dict,
    priority_class_from_dict,
)
from scheduler.codecs.owners import owner_from_dict
from scheduler.codecs.podgroups import composite_podgroup_from_dict, podgroup_of
from scheduler.codecs.queues import queue_from_dict, queue_status_from_dict
from scheduler.codecs.volumes import (
    claim_from_dict,
    csi_driver_from_dict,
    csi_node_from_dict,
    storage_capacity_from_dict,
    storage_class_from_dict,
    volume_attachment_from_dict,
    volume_from_dict,
)
from scheduler.model.owners import OwnerKind
from scheduler.model.pods import GangKey, PodGroupApi
from scheduler.model.queues import QUEUE_API


@dataclass(frozen=True, slots=True)
class Watched:
    """A kind the scheduler reads: its name (the cache's and the informers'), its LIST and
    WATCH path, how a decoded object goes into the cache (``fold``) and how a key leaves it
    (``drop``)."""

    name: str
    path: str
    fold: Callable[[ClusterCache, Any], None]
    drop: Callable[[ClusterCache, str], None]
    # Keyed "namespace/name" (else by name; pods by uid).
    namespaced: bool = False
    # A 404 lists it empty: its CRD not installed, or its API version not served.
    optional: bool = False
    # A 403 lists it empty too: not ours to read, and then placed as if it did not exist.
    restricted: bool = False
    # Kept by our informers; Sakkara's ConfigMaps have a watch of their own.
    informed: bool = True
    # A kind the API server may or may not serve, which the cache must be told
    # (``ClusterCache.serve``): owners and Queues.
    served: bool = False
    # Group versions that serve it, most wanted first, for a kind Kubernetes releases serve
    # at different versions: the one served is listed (``discovery.served_path``), ``path``
    # where none is.
    versions: tuple[str, ...] = ()

    def key_of(self, obj: Mapping[str, Any]) -> str:
        """The key of a raw object of this kind, as the cache and a re-list name it."""
        meta = obj["metadata"]
        if self.name == "pods":
            return str(meta["uid"])
        if self.namespaced:
            return f"{meta['namespace']}/{meta['name']}"
        return str(meta["name"])


def _plain(kind: Kind, path: str, decode: Callable[[Any], Any], **options: Any) -> Watched:
    """A kind the cache only keeps (``cache.kinds``); a decoder that gives no key of its own
    gives (key, object)."""

    def fold(cache: ClusterCache, body: Any) -> None:
        if kind.key is None:
            key, value = decode(body)
            cache.upsert(kind, value, key=key)
        else:
            cache.upsert(kind, decode(body))

    return Watched(kind.name, path, fold, lambda cache, key: cache.remove(kind, key), **options)


def _podgroups(api: PodGroupApi) -> Watched:
    def drop(cache: ClusterCache, key: str) -> None:
        namespace, name = key.split("/", 1)
        cache.remove_podgroup(GangKey(namespace, name), api)

    return Watched(
        api.kind,
        f"/apis/{api.value}/podgroups",
        lambda cache, body: cache.upsert_podgroup(podgroup_of(api, body)),
        drop,
        namespaced=True,
        optional=True,
        versions=WORKLOAD_VERSIONS if api is PodGroupApi.WORKLOAD else (),
    )


# The upstream PodGroup: v1beta1 and v1alpha3 (Kubernetes 1.37), v1alpha2 (1.36).
WORKLOAD_VERSIONS = (
    "scheduling.k8s.io/v1beta1",
    "scheduling.k8s.io/v1alpha3",
    "scheduling.k8s.io/v1alpha2",
)


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


def _owners(kind: OwnerKind) -> Watched:
    return Watched(
        kind.kind,
        OWNER_PATHS[kind],
        lambda cache, body: cache.upsert_owner(owner_from_dict(kind, body)),
        lambda cache, key: cache.remove_owner(kind, key),
        namespaced=True,
        optional=True,
        restricted=True,
        served=True,
    )


def _ignored(cache: ClusterCache, _: Any) -> None:
    """Folded by the ConfigMaps' own watch (``configmaps.apply_configmap``)."""


# In the order a pass would want them folded (nodes before pods).
_ALL = (
    Watched(
        "nodes",
        "/api/v1/nodes",
        lambda cache, body: cache.upsert_node(node_from_dict(body)),
        lambda cache, key: cache.remove_node(key),
    ),
    Watched(
        "pods",
        "/api/v1/pods",
        lambda cache, body: cache.upsert_pod(pod_from_dict(body)),
        lambda cache, key: cache.remove_pod(key),
    ),
    *(_podgroups(api) for api in PodGroupApi),
    # Kubernetes 1.37 with the CompositePodGroup gate and scheduling.k8s.io/v1alpha3: else
    # listed empty, and a PodGroup naming one waits for it (and says why). A ClusterRole
    # from before they were read (403) is the same: every other gang is placed meanwhile.
    _plain(
        kinds.COMPOSITE_PODGROUPS,
        "/apis/scheduling.k8s.io/v1alpha3/compositepodgroups",
        composite_podgroup_from_dict,
        namespaced=True,
        optional=True,
        restricted=True,
    ),
    _plain(
        kinds.PRIORITY_CLASSES,
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        priority_class_from_dict,
    ),
    Watched(
        "namespaces",
        "/api/v1/namespaces",
        lambda cache, body: cache.upsert_namespace(*namespace_from_dict(body)),
        lambda cache, key: cache.remove_namespace(key),
    ),
    _plain(
        kinds.PERSISTENT_VOLUME_CLAIMS,
        "/api/v1/persistentvolumeclaims",
        claim_from_dict,
        namespaced=True,
    ),
    _plain(kinds.PERSISTENT_VOLUMES, "/api/v1/persistentvolumes", volume_from_dict),
    _plain(
        kinds.STORAGE_CLASSES, "/apis/storage.k8s.io/v1/storageclasses", storage_class_from_dict
    ),
    # Attach limits: where RBAC lets us not read them (a role from before they were read),
    # no node has a limit, and nothing else stops.
    _plain(
        kinds.CSI_NODES, "/apis/storage.k8s.io/v1/csinodes", csi_node_from_dict, restricted=True
    ),
    _plain(
        kinds.VOLUME_ATTACHMENTS,
        "/apis/storage.k8s.io/v1/volumeattachments",
        volume_attachment_from_dict,
        restricted=True,
    ),
    # Storage capacity: where RBAC lets us not read it, every provisioner is taken to have
    # room, as kube-scheduler takes a driver that publishes none.
    _plain(
        kinds.CSI_DRIVERS,
        "/apis/storage.k8s.io/v1/csidrivers",
        csi_driver_from_dict,
        restricted=True,
    ),
    _plain(
        kinds.STORAGE_CAPACITIES,
        "/apis/storage.k8s.io/v1/csistoragecapacities",
        storage_capacity_from_dict,
        namespaced=True,
        restricted=True,
    ),
    _plain(
        kinds.DISRUPTION_BUDGETS,
        "/apis/policy/v1/poddisruptionbudgets",
        budget_from_dict,
        namespaced=True,
    ),
    # Dynamic resource allocation: devices, their classes, and the claims for them. An API
    # server older than 1.34 serves no resource.k8s.io/v1: no devices.
    _plain(
        kinds.RESOURCE_SLICES,
        "/apis/resource.k8s.io/v1/resourceslices",
        slice_from_dict,
        optional=True,
        restricted=True,
    ),
    _plain(
        kinds.DEVICE_CLASSES,
        "/apis/resource.k8s.io/v1/deviceclasses",
        device_class_from_dict,
        optional=True,
        restricted=True,
    ),
    Watched(
        "resourceclaims",
        "/apis/resource.k8s.io/v1/resourceclaims",
        lambda cache, body: cache.upsert_resource_claim(resource_claim_from_dict(body)),
        lambda cache, key: cache.remove_resource_claim(key),
        namespaced=True,
        optional=True,
        restricted=True,
    ),
    # Volcano's Queues: teams' quotas and shares; without the CRD, no queues.
    Watched(
        QUEUES,
        f"/apis/{QUEUE_API}/queues",
        lambda cache, body: cache.upsert_queue(queue_from_dict(body), queue_status_from_dict(body)),
        lambda cache, key: cache.remove_queue(key),
        optional=True,
        restricted=True,
        served=True,
    ),
    # The owners that make gangs of pods that declare none (gangs from owners).
    *(_owners(kind) for kind in OwnerKind),
    # Sakkara's ConfigMaps, by label: a topology-placed gang must not be placed on a tree
    # that has not arrived yet.
    Watched(
        "topologies",
        "/api/v1/configmaps?labelSelector=sakkara.topology",
        _ignored,
        lambda cache, key: cache.remove(kinds.TOPOLOGIES, key),
        namespaced=True,
        informed=False,
    ),
    Watched(
        "groups",
        "/api/v1/configmaps?labelSelector=sakkara.group",
        _ignored,
        lambda cache, key: cache.remove(kinds.GROUPS, key),
        namespaced=True,
        informed=False,
    ),
)

WATCHED: Mapping[str, Watched] = MappingProxyType({kind.name: kind for kind in _ALL})
# The kinds our informers keep in the cache, in folding order.
INFORMED = tuple(kind.name for kind in _ALL if kind.informed)
