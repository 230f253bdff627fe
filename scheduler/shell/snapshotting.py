"""``gang-scheduler snapshot``: the cluster as the core sees it, to a file and back.

The file holds the Kubernetes objects themselves, as LISTed, by the name the cache knows
their kind by (``pods``, ``nodes``, ``podgroups``, ``queues``, ``topologies``, ...), so that
the same codecs and the cache's upserts read it back (``fold``): a snapshot read from the
file is the snapshot a fresh LIST gives ``explain``. Kinds the API server does not serve (a
CRD not installed) are listed in ``unserved``, as the informers would find them.

Managed fields and ``last-applied-configuration`` are left out: they are large and the
scheduler reads neither.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.cel import Selectors
from scheduler.model.config import Config
from scheduler.shell.api import ApiClient, Credentials
from scheduler.shell.configmaps import apply_configmap
from scheduler.shell.kinds import WATCHED
from scheduler.shell.syncing import list_versioned

API_VERSION = "gang-scheduler.io/v1alpha1"
KIND = "ClusterSnapshot"
# Every kind the cache is fed, in the order a pass would want them folded (nodes first).
SNAPSHOT_KINDS = tuple(WATCHED)
_DROPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


def _trim(body: dict[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            for key in _DROPPED_ANNOTATIONS:
                annotations.pop(key, None)
    return body


async def take(
    credentials: Credentials,
    *,
    topology_namespace: str = "gang-scheduler-system",
    readable_only: bool = False,
) -> dict[str, Any]:
    """Every object the scheduler reads, LISTed now, as one document. ``readable_only``: a
    kind the credentials may not list (403) is taken as empty (``explain`` for a user with
    less RBAC than the scheduler's) rather than an error."""
    api = ApiClient(credentials, connections=4)
    lists: dict[str, list[dict[str, Any]]] = {}
    unserved: list[str] = []
    try:
        for kind in SNAPSHOT_KINDS:
            bodies, version = await list_versioned(api, kind, readable_only=readable_only)
            if version is None and WATCHED[kind].optional:
                unserved.append(kind)
            lists[kind] = [_trim(body) for body in bodies]
    finally:
        await api.close()
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "takenAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "topologyNamespace": topology_namespace,
        },
        "unserved": unserved,
        "lists": lists,
    }


def write(document: Mapping[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")


def read(path: str | Path) -> dict[str, Any]:
    """A snapshot file (JSON; YAML too, for one written or edited by hand)."""
    raw = Path(path).read_text()
    try:
        document = json.loads(raw)
    except json.JSONDecodeError:
        import yaml  # noqa: PLC0415

        try:
            document = yaml.safe_load(raw)
        except yaml.YAMLError as error:
            raise ValueError(f"{path}: neither JSON nor YAML: {error}") from None
    if not isinstance(document, dict) or document.get("kind") != KIND:
        raise ValueError(f"{path}: not a {KIND} (written by gang-scheduler snapshot)")
    return document


def fold(
    document: Mapping[str, Any],
    *,
    config: Config,
    topology_namespace: str | None = None,
) -> ClusterCache:
    """A cache holding what the document holds, as the informers would have filled it."""
    cache = ClusterCache(
        scheduler_name=config.scheduler_name,
        aliases=config.aliases,
        selectors=Selectors().evaluate,
    )
    namespace = topology_namespace or document.get("metadata", {}).get(
        "topologyNamespace", "gang-scheduler-system"
    )
    unserved = set(document.get("unserved", ()))
    lists: Mapping[str, list[dict[str, Any]]] = document.get("lists", {})
    for kind in SNAPSHOT_KINDS:
        watched = WATCHED[kind]
        if not watched.informed:  # Sakkara's ConfigMaps
            for body in lists.get(kind, ()):
                apply_configmap(cache, body, topology_namespace=namespace)
            continue
        if watched.served:  # served or not, as the LIST found them
            cache.serve(kind, kind not in unserved and kind in lists)
        for body in lists.get(kind, ()):
            watched.fold(cache, body)
    return cache
