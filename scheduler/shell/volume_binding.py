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
``bindTimeoutSeconds``). Taking back clears the selected-node of a claim not bound yet, so
that no claim points at a node the gang will not use, and the claimRef this scheduler wrote
on a volume whose claim the PV controller has not started to bind. A volume whose claimRef
named the claim before (its provisioner made it for the claim) is the claim's: nothing is
written on it, and nothing taken back.

Claims are written under the scheduler's name as their field manager, so that the passes
know, from the claim alone, which selected-node is this scheduler's and since when: one left
by a replica that died mid-wait is released once the wait is long over (``release``,
``core/volume_leftovers.py``)."""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog

from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.shapes import obj, text
from scheduler.codecs.volumes import claim_from_dict, volume_from_dict
from scheduler.core.volume_binding import reachable
from scheduler.model.decisions import VolumeRelease, VolumeWrite
from scheduler.model.pods import PodRef
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
        manager: str = "gang-scheduler",
    ) -> None:
        self._api = api
        self._manager = f"?fieldManager={urllib.parse.quote(manager)}"
        # Releases sent, by (claim uid, resourceVersion): the passes until the watch shows
        # one ask for it again, and once is enough.
        self._released: set[tuple[str, str]] = set()
        self._cache = cache
        self._fence = fence
        self._timeout = timeout_seconds
        self._poll = poll_seconds

    async def bind(
        self,
        writes: tuple[VolumeWrite, ...],
        *,
        nodes: Mapping[PodRef, str],
        landed: list[VolumeWrite],
    ) -> str:
        """Write every choice, then wait until every claim is bound (``nodes``: where each
        pod goes). ``landed`` gets each write as it lands, so that a caller whose wait is
        cancelled knows what to take back. Returns what went wrong ("" once every claim is
        bound)."""
        written: dict[int, int] = {}  # id(write) -> the resourceVersion it left
        for write in writes:
            if not self._fence():
                return "this replica no longer holds the leader Lease; nothing sent"
            answer = await self._write(write)
            if isinstance(answer, str):
                return answer
            landed.append(write)
            written[id(write)] = _version(text(obj(answer.get("metadata")).get("resourceVersion")))
        log.debug("volume choices written", choices=[_said(w, nodes) for w in writes])
        return await self._bound(writes, nodes=nodes, written=written)

    async def _write(self, write: VolumeWrite) -> dict[str, Any] | str:
        """The object as the write left it, or what went wrong."""
        if write.prebound:  # the PV controller completes it: nothing to write
            return {"metadata": {"resourceVersion": write.resource_version}}
        try:
            if write.provisions:
                return await self._api.merge_patch(
                    claim_path(write.namespace, write.name) + self._manager,
                    {"metadata": {"uid": write.uid,
                                  "annotations": {SELECTED_NODE_ANNOTATION: write.node}}},
                )  # fmt: skip
            return await self._api.merge_patch(
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

    async def _bound(
        self,
        writes: tuple[VolumeWrite, ...],
        *,
        nodes: Mapping[PodRef, str],
        written: Mapping[int, int],
    ) -> str:
        """Wait until the watch shows every claim bound; "" then, else why not."""
        deadline = time.monotonic() + self._timeout
        while True:
            waiting = 0
            for write in writes:
                why = self._state(write, nodes.get(write.pod, write.node), written[id(write)])
                if why is None:
                    waiting += 1
                elif why:
                    return why
            if not waiting:
                log.debug(
                    "volumes bound",
                    claims=[
                        f"{w.namespace}/{w.name}: {c.volume if c else '?'}"
                        for w in writes
                        for c in (self._cache.claim(w.namespace, w.name),)
                    ],
                )
                return ""
            if time.monotonic() >= deadline:
                return (
                    f"{waiting} of the group's persistentvolumeclaims were not bound within "
                    f"{self._timeout:g}s"
                )
            if not self._fence():
                return "this replica no longer holds the leader Lease"
            await asyncio.sleep(self._poll)

    def _state(self, write: VolumeWrite, node_name: str, version: int) -> str | None:
        """kube-scheduler's ``checkBindings`` for one write: "" when its claim is bound as
        planned, None while it may still be (or while the watch shows the object older than
        the write), else why it will not be."""
        subject = f"persistentvolumeclaim {write.namespace}/{write.name}"
        claim = self._cache.claim(write.namespace, write.name)
        if claim is None or claim.uid != write.uid:
            return f"{subject} was deleted"
        node = self._cache.nodes.nodes.get(node_name)
        if node is None:
            return f"node {node_name} was deleted"
        if write.provisions:
            if _version(claim.resource_version) < version:
                return None  # the watch has not shown our write yet
            if claim.selected_node != write.node:
                # A provisioner that cannot make it takes its selected-node off.
                return (
                    f"provisioning the volume of {subject} on node {write.node} failed: its "
                    "provisioner gave it back (the selected-node annotation was removed)"
                )
            made = self._cache.volume(claim.volume) if claim.volume else None
            if made is not None and not reachable(made, node):
                return (
                    f"persistentvolume {made.name} made for {subject} is out of reach of node "
                    f"{node_name}"
                )
            return "" if claim.fully_bound and made is not None else None
        volume = self._cache.volume(write.volume)
        if volume is None:
            return f"persistentvolume {write.volume} was deleted"
        if _version(volume.resource_version) < version:
            return None
        if not reachable(volume, node):
            return f"persistentvolume {write.volume} is out of reach of node {node_name}"
        if volume.claim is None or not volume.claim.uid:
            return f"the claimRef of persistentvolume {write.volume} was reset"
        if not volume.claim.names(claim):
            return f"persistentvolume {write.volume} was taken by another claim"
        if claim.fully_bound and claim.volume != write.volume:
            return f"{subject} was bound to {claim.volume}, not {write.volume}"
        return "" if claim.fully_bound else None

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
        if write.prebound:
            return
        claim = claim_from_dict(
            await self._api.request("GET", claim_path(write.namespace, write.name))
        )
        if claim.uid != write.uid or claim.fully_bound:
            return
        if write.provisions:
            if claim.selected_node == write.node:
                await self._api.merge_patch(
                    claim_path(write.namespace, write.name) + self._manager,
                    {"metadata": {"uid": write.uid, "resourceVersion": claim.resource_version,
                                  "annotations": {SELECTED_NODE_ANNOTATION: None}}},
                )  # fmt: skip
            return
        if claim.volume:
            # The PV controller is binding them (the claim names the volume, not yet marked
            # complete): a claimRef cleared now would leave the claim naming a volume that
            # another claim may take.
            return
        volume = volume_from_dict(await self._api.request("GET", volume_path(write.volume)))
        if volume.claim is None or volume.claim.uid != write.uid:
            return
        await self._api.merge_patch(
            volume_path(write.volume),
            {
                "metadata": {
                    "resourceVersion": volume.resource_version,
                    "annotations": {BOUND_BY_CONTROLLER_ANNOTATION: None},
                },
                "spec": {"claimRef": None},
            },
        )

    async def release(self, leftover: VolumeRelease) -> None:
        """Take a leftover selected-node off its claim, if the claim is still as the pass saw
        it (its uid and resourceVersion): a claim changed since is the next pass's to judge.
        Best effort, and only while this replica leads."""
        sent = (leftover.uid, leftover.resource_version)
        if not self._fence() or sent in self._released:
            return
        if len(self._released) > 10_000:  # kept small: only the latest matter
            self._released.clear()
        self._released.add(sent)
        subject = f"persistentvolumeclaim {leftover.namespace}/{leftover.name}"
        try:
            await self._api.merge_patch(
                claim_path(leftover.namespace, leftover.name) + self._manager,
                {"metadata": {"uid": leftover.uid, "resourceVersion": leftover.resource_version,
                              "annotations": {SELECTED_NODE_ANNOTATION: None}}},
            )  # fmt: skip
        except ApiError as error:
            if error.status not in (404, 409):
                # Not an answer about the claim (the API server away, a 5xx): the next pass
                # that finds it due sends it again.
                self._released.discard(sent)
                log.warning(
                    "volume choice not released", claim=subject, error=error.message or error.reason
                )
            return
        log.info(
            "volume choice released: no volume was made and no pod uses it there",
            claim=subject,
            node=leftover.node,
        )


def _said(write: VolumeWrite, nodes: Mapping[PodRef, str]) -> str:
    """One choice, for the debug log: the claim, what it gets, and its pod's node."""
    what = f"made on {write.node}" if write.provisions else f"volume {write.volume}"
    if write.prebound:
        what += " (made for it)"
    return f"{write.namespace}/{write.name}: {what}, pod on {nodes.get(write.pod, write.node)}"


def _version(resource_version: str) -> int:
    """A resourceVersion as kube-scheduler compares them (a number); 0 if it is not one."""
    try:
        return int(resource_version)
    except ValueError:
        return 0
