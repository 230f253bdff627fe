"""Writing a group's volume choices before any of its binds, waiting until every claim is
bound, and taking back what a group that does not bind wrote (kube-scheduler's PreBind and
Unreserve of the VolumeBinding plugin, for a whole GangGroup).

As kube-scheduler writes them: an existing volume chosen for a claim gets its
``spec.claimRef`` (and ``pv.kubernetes.io/bound-by-controller``), conditional on the
volume's resourceVersion, and the PV controller completes the binding; a claim whose volume
is to be made gets ``volume.kubernetes.io/selected-node``, and its provisioner makes the
volume there. The pods are bound only once every claim of the group is bound (its
``volumeName`` set and the PV controller's ``pv.kubernetes.io/bind-completed``), as the
watch shows them.

The wait ends in failure when a claim goes, is bound to another volume, loses its
selected-node (its provisioner gave it back: provisioning failed), or when the group's
volumes are not all bound within ``timeout_seconds`` (kube-scheduler's
``bindTimeoutSeconds``). Taking back clears the claimRef of a volume whose claim is not bound
yet, and the selected-node of a claim not bound yet, so that no claim points at a node the
gang will not use."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

import structlog

from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.volumes import claim_from_dict, volume_from_dict
from scheduler.model.decisions import VolumeWrite
from scheduler.model.volumes import BOUND_BY_CONTROLLER_ANNOTATION, SELECTED_NODE_ANNOTATION
from scheduler.shell.api import ApiClient, ApiError

log = structlog.get_logger()

# kube-scheduler's default (VolumeBindingArgs.bindTimeoutSeconds).
BIND_TIMEOUT_SECONDS = 600.0


def claim_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}"


def volume_path(name: str) -> str:
    return f"/api/v1/persistentvolumes/{name}"


class VolumeWriter:
    def __init__(
        self,
        api: ApiClient,
        cache: ClusterCache,
        *,
        fence: Callable[[], bool] = lambda: True,
        timeout_seconds: float = BIND_TIMEOUT_SECONDS,
        poll_seconds: float = 0.1,
    ) -> None:
        self._api = api
        self._cache = cache
        self._fence = fence
        self._timeout = timeout_seconds
        self._poll = poll_seconds

    async def bind(self, writes: tuple[VolumeWrite, ...]) -> tuple[list[VolumeWrite], str]:
        """Write every choice, then wait until every claim is bound. Returns the writes
        that landed, and what went wrong ("" once every claim is bound)."""
        landed: list[VolumeWrite] = []
        for write in writes:
            if not self._fence():
                return landed, "this replica no longer holds the leader Lease; nothing sent"
            error = await self._write(write)
            if error:
                return landed, error
            landed.append(write)
        return landed, await self._bound(writes)

    async def _write(self, write: VolumeWrite) -> str:
        try:
            if write.provisions:
                await self._api.merge_patch(
                    claim_path(write.namespace, write.name),
                    {"metadata": {"uid": write.uid,
                                  "annotations": {SELECTED_NODE_ANNOTATION: write.node}}},
                )  # fmt: skip
            else:
                await self._api.merge_patch(
                    volume_path(write.volume),
                    {
                        "metadata": {
                            "resourceVersion": write.resource_version,
                            "annotations": {BOUND_BY_CONTROLLER_ANNOTATION: "yes"},
                        },
                        "spec": {"claimRef": {
                            "kind": "PersistentVolumeClaim", "apiVersion": "v1",
                            "namespace": write.namespace, "name": write.name, "uid": write.uid,
                        }},
                    },
                )  # fmt: skip
        except ApiError as error:
            what = (
                f"asking for the volume of persistentvolumeclaim {write.namespace}/"
                f"{write.name} on node {write.node}"
                if write.provisions
                else f"binding persistentvolume {write.volume} to persistentvolumeclaim "
                f"{write.namespace}/{write.name}"
            )
            if error.status == 409:
                return f"{what}: it changed since the pass saw it"
            return f"{what} failed: {error.message or error.reason}"
        return ""

    async def _bound(self, writes: tuple[VolumeWrite, ...]) -> str:
        """Wait until the watch shows every claim bound; "" then, else why not."""
        deadline = time.monotonic() + self._timeout
        asked: set[tuple[str, str]] = set()  # claims seen with their selected-node
        while True:
            waiting = 0
            for write in writes:
                why = self._state(write, asked)
                if why is None:
                    waiting += 1
                elif why:
                    return why
            if not waiting:
                return ""
            if time.monotonic() >= deadline:
                return (
                    f"{waiting} of the group's persistentvolumeclaims were not bound within "
                    f"{self._timeout:g}s"
                )
            if not self._fence():
                return "this replica no longer holds the leader Lease"
            await asyncio.sleep(self._poll)

    def _state(self, write: VolumeWrite, asked: set[tuple[str, str]]) -> str | None:
        """ "" when the write's claim is bound as planned, None while it may still be, else
        why it will not be."""
        key = (write.namespace, write.name)
        subject = f"persistentvolumeclaim {write.namespace}/{write.name}"
        claim = self._cache.claim(*key)
        if claim is None or claim.uid != write.uid:
            return f"{subject} was deleted"
        if claim.fully_bound:
            if not write.provisions and claim.volume != write.volume:
                return f"{subject} was bound to {claim.volume}, not {write.volume}"
            return ""
        if write.provisions:
            if claim.selected_node == write.node:
                asked.add(key)
            elif key in asked:
                return (
                    f"provisioning the volume of {subject} on node {write.node} failed: its "
                    "provisioner gave it back (the selected-node annotation was removed)"
                )
            return None
        volume = self._cache.volume(write.volume)
        if volume is None:
            return f"persistentvolume {write.volume} was deleted"
        if volume.claim is not None and not volume.claim.names(claim):
            return f"persistentvolume {write.volume} was taken by another claim"
        return None

    async def take_back(self, writes: Iterable[VolumeWrite]) -> None:
        """Undo what landed for claims not bound yet, read afresh from the API server (the
        watch may not show the write yet); best effort, and only while this replica leads
        (a new leader may have chosen the same again). A claim bound meanwhile keeps its
        volume, as kube-scheduler's Unreserve leaves it."""
        for write in writes:
            if not self._fence():
                return
            try:
                await self._take_back(write)
            except ApiError as error:
                if error.status != 404:
                    log.warning(
                        "volume choice not taken back",
                        claim=f"{write.namespace}/{write.name}",
                        error=error.message or error.reason,
                    )

    async def _take_back(self, write: VolumeWrite) -> None:
        claim = claim_from_dict(
            await self._api.request("GET", claim_path(write.namespace, write.name))
        )
        if claim.uid != write.uid or claim.fully_bound:
            return
        if write.provisions:
            if claim.selected_node == write.node:
                await self._api.merge_patch(
                    claim_path(write.namespace, write.name),
                    {"metadata": {"uid": write.uid, "resourceVersion": claim.resource_version,
                                  "annotations": {SELECTED_NODE_ANNOTATION: None}}},
                )  # fmt: skip
            return
        volume = volume_from_dict(await self._api.request("GET", volume_path(write.volume)))
        if volume.claim is None or volume.claim.uid != write.uid:
            return
        await self._api.merge_patch(
            volume_path(write.volume),
            {"metadata": {"resourceVersion": volume.resource_version}, "spec": {"claimRef": None}},
        )
