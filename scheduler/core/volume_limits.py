"""kube-scheduler's NodeVolumeLimits for CSI volumes, as plain data: a node whose CSINode
states how many volumes of a driver it may have attached takes no pod whose new volumes of
that driver would pass the count, the volumes of the pods there (those this pass placed
included) and of its VolumeAttachments counted once each.

Ported from kube-scheduler v1.36 (``nodevolumelimits/csi.go``: ``Filter``,
``filterAttachableVolumes``, ``getCSIDriverInfo``, ``getCSIDriverInfoFromSC``). In-tree
volumes migrated to CSI are not translated: only CSI volumes count."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from scheduler.model.pods import Pod
from scheduler.model.volumes import Claim, CsiNode, StorageClass, Volume, VolumeAttachment

MAX_VOLUME_COUNT = "node(s) exceed max volume count"


def attachable(
    pod: Pod,
    *,
    claims: Mapping[tuple[str, str], Claim],
    volumes: Mapping[str, Volume],
    classes: Mapping[str, StorageClass],
) -> dict[str, str]:
    """The CSI volumes ``pod`` has attached where it runs: unique name -> driver. A claim
    not bound yet counts as a volume of its class's provisioner, named after the claim."""
    found: dict[str, str] = {}
    for name in pod.claims:
        claim = claims.get((pod.ref.namespace, name))
        if claim is None:
            continue  # not counted: nothing says it belongs to this pod
        volume = volumes.get(claim.volume) if claim.volume else None
        if volume is not None:
            if volume.csi_driver and volume.volume_handle:
                found[f"{volume.csi_driver}/{volume.volume_handle}"] = volume.csi_driver
            continue
        storage_class = classes.get(claim.storage_class) if claim.storage_class else None
        if storage_class is not None and storage_class.provisioner:
            # Claims still to be bound: named apart from any volume handle.
            found[f"claim:{claim.namespace}/{claim.name}"] = storage_class.provisioner
    return found


def limit_reason(
    pod: Pod,
    *,
    csi_node: CsiNode | None,
    others: Iterable[Pod],
    attachments: Iterable[VolumeAttachment],
    claims: Mapping[tuple[str, str], Claim],
    volumes: Mapping[str, Volume],
    classes: Mapping[str, StorageClass],
) -> str:
    """Why ``pod`` would pass a CSI attach limit of the node (``others``: the pods there,
    ``attachments``: its VolumeAttachments); "" if it would not."""
    if csi_node is None or not csi_node.limits or not pod.claims:
        return ""
    new = attachable(pod, claims=claims, volumes=volumes, classes=classes)
    if not new:
        return ""
    attached: dict[str, str] = {}
    for other in others:
        if other.claims and other.ref.uid != pod.ref.uid:
            attached.update(attachable(other, claims=claims, volumes=volumes, classes=classes))
    for unique in attached:
        new.pop(unique, None)  # a volume a pod there uses already counts once
    counted = Counter(attached.values())
    for attachment in attachments:
        volume = volumes.get(attachment.volume) if attachment.volume else None
        if not attachment.attacher or volume is None or not volume.volume_handle:
            continue
        if f"{attachment.attacher}/{volume.volume_handle}" not in attached:
            counted[attachment.attacher] += 1  # not counted twice with a pod's
    for driver, count in Counter(new.values()).items():
        limit = csi_node.limits.get(driver)
        if limit is not None and counted[driver] + count > limit:
            return MAX_VOLUME_COUNT
    return ""
