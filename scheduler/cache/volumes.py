"""The volume choices of binds in flight, as kube-scheduler's assume cache keeps them: from
when a group is handed to the binder until the watch shows each write (a volume's claimRef
naming its claim, a claim's selected-node) or the write is forgotten, the passes see the
volume taken and the claim asked for on its node. Without it, the pass after a group's
could choose the same volume for another claim before the watch shows it gone."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from scheduler.cache import kinds
from scheduler.model.decisions import VolumeWrite
from scheduler.model.pods import Pod
from scheduler.model.volumes import Claim, ClaimRef, Volume


def storage_of(stored: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The snapshot's storage fields that the stores hold as they are (classes, CSI nodes
    and attachments, drivers and their published capacity)."""
    return {
        "storage_classes": dict(stored[kinds.STORAGE_CLASSES.name]),
        "csi_nodes": dict(stored[kinds.CSI_NODES.name]),
        "volume_attachments": tuple(stored[kinds.VOLUME_ATTACHMENTS.name].values()),
        "csi_drivers": dict(stored[kinds.CSI_DRIVERS.name]),
        "storage_capacities": tuple(
            c for _, c in sorted(stored[kinds.STORAGE_CAPACITIES.name].items())
        ),
    }


def names_exclusive(pod: Pod, claim_of: Callable[[str, str], Claim | None]) -> bool:
    """Whether ``pod`` names a ReadWriteOncePod claim by ``persistentVolumeClaim`` (the
    claims kube-scheduler counts users of): its going may be what a gang waits for, on
    whatever node."""
    return any(
        (claim := claim_of(pod.ref.namespace, name)) is not None and claim.exclusive
        for name in pod.claims
        if name not in pod.ephemeral_claims
    )


class AssumedVolumes:
    def __init__(self) -> None:
        self._volumes: dict[str, VolumeWrite] = {}  # by volume name
        self._claims: dict[tuple[str, str], VolumeWrite] = {}  # provisions, by claim

    def __bool__(self) -> bool:
        return bool(self._volumes or self._claims)

    def assume(self, writes: Iterable[VolumeWrite]) -> None:
        for write in writes:
            if write.provisions:
                self._claims[(write.namespace, write.name)] = write
            else:
                self._volumes[write.volume] = write

    def forget(self, writes: Iterable[VolumeWrite]) -> None:
        """These writes (only these: another group's may have come since) are over."""
        for write in writes:
            if write.provisions:
                key = (write.namespace, write.name)
                if self._claims.get(key) is write:
                    del self._claims[key]
            elif self._volumes.get(write.volume) is write:
                del self._volumes[write.volume]

    def overlay(
        self, claims: Mapping[tuple[str, str], Claim], volumes: Mapping[str, Volume]
    ) -> tuple[dict[tuple[str, str], Claim], dict[str, Volume]]:
        """The claims and volumes as the writes in flight will leave them. A write the
        watch shows already (or whose object is gone) is dropped here."""
        claims, volumes = dict(claims), dict(volumes)
        for name, write in list(self._volumes.items()):
            volume = volumes.get(name)
            if volume is None or (volume.claim is not None and volume.claim.uid == write.uid):
                del self._volumes[name]
                continue
            ref = ClaimRef(write.namespace, write.name, write.uid)
            volumes[name] = replace(volume, claim=ref)
        for key, write in list(self._claims.items()):
            claim = claims.get(key)
            if claim is None or claim.uid != write.uid or claim.selected_node == write.node:
                del self._claims[key]
                continue
            claims[key] = replace(claim, selected_node=write.node, selected_at=None)
        return claims, volumes
