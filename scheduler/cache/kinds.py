"""The kinds the cache keeps in a plain store, each described once.

A kind whose objects only need keeping (and a word on what their change means for passes)
is a ``Kind``: the cache's generic ``upsert``/``remove`` keep it in a store of its own, with
the delivery stamps a re-list needs, and mark the next pass as the descriptor says. Kinds
whose changes the cache must follow closely (pods, nodes, PodGroups, owners, Queues,
namespaces, ResourceClaims) have handlers of their own in ``ClusterCache``; the shell
describes how every kind is listed, watched and decoded (``shell/kinds.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any


class Change(Enum):
    """What a change of an object means for the passes."""

    WORK = "work"  # a pass may decide something new: the next pass runs
    # It may change what any waiting gang can do (a parked one too): the next pass runs and
    # looks at every gang.
    EVERYTHING = "everything"


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind kept in a plain store: its name (the informers' and the re-list's), the key of
    an object in it (None: the caller gives it), and what a change (an object added or
    changed) and a removal mean."""

    name: str
    key: Callable[[Any], str] | None = None
    change: Change = Change.EVERYTHING
    removal: Change = Change.EVERYTHING
    # Re-listed by an informer (``Deliveries``): a removal is a delivery, stamped. The
    # ConfigMaps' own watch re-lists otherwise.
    relisted: bool = True


def _named(obj: Any) -> str:
    return str(obj.name)


def _in_namespace(obj: Any) -> str:
    return f"{obj.namespace}/{obj.name}"


# Priority classes, storage and device classes change rarely and may let any waiting gang go.
PRIORITY_CLASSES = Kind("priorityclasses", _named)
PERSISTENT_VOLUME_CLAIMS = Kind("persistentvolumeclaims", _in_namespace)
PERSISTENT_VOLUMES = Kind("persistentvolumes", _named)
# StorageClasses by name.
STORAGE_CLASSES = Kind("storageclasses")
# Nodes' CSI attach limits, and the volumes attached: a change may let a gang go anywhere.
CSI_NODES = Kind("csinodes", _named)
VOLUME_ATTACHMENTS = Kind("volumeattachments", _named)
# Storage capacity published by CSI drivers that opt in: a change may let a gang go anywhere.
CSI_DRIVERS = Kind("csidrivers", _named)
STORAGE_CAPACITIES = Kind("csistoragecapacities", _in_namespace)
# A slice removed takes devices away: work (a pass may say so), never room for anyone.
RESOURCE_SLICES = Kind("resourceslices", _named, removal=Change.WORK)
DEVICE_CLASSES = Kind("deviceclasses", _named)
# Read by preemption only: a change makes no room, but the next pass must see it.
DISRUPTION_BUDGETS = Kind(
    "poddisruptionbudgets", _in_namespace, change=Change.WORK, removal=Change.WORK
)
# Kubernetes 1.37's CompositePodGroups (v1alpha3), by "namespace/name": a change may let any
# gang of its hierarchy go.
COMPOSITE_PODGROUPS = Kind("compositepodgroups", lambda c: str(c.key))
# Sakkara's ConfigMaps, by "namespace/name", watched by a watch of their own: a topology
# is kept as (topology, errors), a Sakkara group as itself.
TOPOLOGIES = Kind("topologies", relisted=False)
GROUPS = Kind("groups", relisted=False)

STORED = (
    PRIORITY_CLASSES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
    CSI_NODES,
    VOLUME_ATTACHMENTS,
    CSI_DRIVERS,
    STORAGE_CAPACITIES,
    RESOURCE_SLICES,
    DEVICE_CLASSES,
    DISRUPTION_BUDGETS,
    COMPOSITE_PODGROUPS,
    TOPOLOGIES,
    GROUPS,
)
