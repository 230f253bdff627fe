"""A node whose CSINode states how many volumes of a driver it may have attached takes no pod
that would pass the count, as kube-scheduler's NodeVolumeLimits decides: cases of its
TestCSILimits by their names there (CSI volumes; in-tree migration is not translated), and a
gang spread by the limit."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core.scheduling import schedule
from scheduler.core.volume_limits import MAX_VOLUME_COUNT, limit_reason
from scheduler.model.config import Config
from scheduler.model.pods import Pod
from scheduler.model.volumes import (
    WAIT_FOR_FIRST_CONSUMER,
    Claim,
    CsiNode,
    StorageClass,
    Volume,
    VolumeAttachment,
)
from tests.unit.builders import T0, node, pod, snapshot

EBS, GCE = "ebs.csi.aws.com", "pd.csi.storage.gke.io"
SC = "csi-sc"


def _world(drivers: tuple[str, ...]) -> tuple[dict, dict, dict]:
    """getFakeCSIPVLister and getFakeCSIPVCLister: csi-<driver>-<j> bound to a CSI volume
    of that handle; csi-4 pending (of the class), csi-5 without a class, csi-6 bound to a
    volume that does not exist."""
    claims, volumes = {}, {}
    for driver in drivers:
        for j in range(4):
            name = f"csi-{driver}-{j}"
            claims[("default", name)] = Claim("default", name, volume=name)
            volumes[name] = Volume(name, csi_driver=driver, volume_handle=name)
    for name, kw in (("csi-4", {"storage_class": SC}), ("csi-5", {}),
                     ("csi-6", {"storage_class": SC, "volume": "missing-in-action"})):  # fmt: skip
        claims[("default", name)] = Claim("default", name, **kw)  # type: ignore[arg-type]
    return claims, volumes, {SC: StorageClass(SC, WAIT_FOR_FIRST_CONSUMER, drivers[0])}


def _pod(name: str, *claims: str) -> Pod:
    volumes = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in
               enumerate(claims)]  # fmt: skip
    return pod(name, spec={"volumes": volumes})


RUNNING = _pod("running", f"csi-{EBS}-3")
PENDING_VOLUME = _pod("pending", "csi-4")
UNBOUND_PVC_2 = _pod("unbound2", "csi-4")
MISSING_PV = _pod("missing", "csi-6")
NO_SC = _pod("nosc", "csi-5")
GCE_TWO = _pod("gce2", f"csi-{GCE}-1", f"csi-{GCE}-2")
EBS_ONE = _pod("ebs1", f"csi-{EBS}-0")
EBS_TWO = _pod("ebs2", f"csi-{EBS}-1", f"csi-{EBS}-2")


@pytest.mark.parametrize(
    ("case", "new", "existing", "limit", "drivers", "attached", "exceeds"),
    [
        ("should count VolumeAttachments towards volume limit when no pods exist",
         EBS_ONE, [], 2, (EBS,), 2, True),
        ("should schedule pod when VolumeAttachments count does not exceed limit",
         EBS_ONE, [], 2, (EBS,), 1, False),
        ("fits when node volume limit >= new pods CSI volume",
         EBS_ONE, [RUNNING, EBS_TWO], 4, (EBS,), 0, False),
        ("doesn't when node volume limit <= pods CSI volume",
         EBS_ONE, [RUNNING, EBS_TWO], 2, (EBS,), 0, True),
        ("count pending PVCs towards volume limit <= pods CSI volume",
         EBS_ONE, [PENDING_VOLUME, EBS_TWO], 2, (EBS,), 0, True),
        ("count multiple pending pvcs towards volume limit >= pods CSI volume",
         EBS_ONE, [PENDING_VOLUME, UNBOUND_PVC_2, EBS_TWO], 4, (EBS,), 0, False),
        ("should count PVCs with invalid PV name but valid SC",
         EBS_ONE, [MISSING_PV, EBS_TWO], 2, (EBS,), 0, True),
        ("don't count pvcs with missing SC towards volume limit",
         EBS_ONE, [RUNNING, NO_SC], 2, (EBS,), 0, False),
        ("count pvcs with the same type towards volume limit",
         EBS_ONE, [GCE_TWO, EBS_TWO], 2, (EBS, GCE), 0, True),
        ("don't count pvcs with different type towards volume limit",
         GCE_TWO, [EBS_TWO, RUNNING], 2, (EBS, GCE), 0, False),
    ],
)  # fmt: skip
def test_csi_limits(case, new, existing, limit, drivers, attached, exceeds) -> None:  # noqa: PLR0917
    claims, volumes, classes = _world(drivers)
    # Attachments of volumes no pod here uses (buildFakeClientWithVALister).
    attachments = []
    for i in range(attached):
        name = f"va-{i}"
        volumes[name] = Volume(name, csi_driver=EBS, volume_handle=f"va-handle-{i}")
        attachments.append(VolumeAttachment(name, "node", EBS, name))
    reason = limit_reason(
        new,
        csi_node=CsiNode("node", {d: limit for d in drivers}),
        others=existing,
        attachments=attachments,
        claims=claims,
        volumes=volumes,
        classes=classes,
    )
    assert reason == (MAX_VOLUME_COUNT if exceeds else ""), case


def test_should_when_driver_does_not_support_volume_limits_and_nil_csi_node() -> None:
    claims, volumes, classes = _world((EBS,))
    for csi_node in (CsiNode("node", {}), None):
        assert not limit_reason(
            EBS_ONE, csi_node=csi_node, others=[RUNNING, EBS_TWO], attachments=[],
            claims=claims, volumes=volumes, classes=classes,
        )  # fmt: skip


def test_a_volume_a_pod_on_the_node_uses_already_counts_once() -> None:
    claims, volumes, classes = _world((EBS,))
    shared = _pod("again", f"csi-{EBS}-0")
    assert not limit_reason(
        shared, csi_node=CsiNode("node", {EBS: 1}), others=[EBS_ONE], attachments=[],
        claims=claims, volumes=volumes, classes=classes,
    )  # fmt: skip


def test_a_gang_is_spread_by_its_nodes_attach_limits_and_says_so_when_they_are_full() -> None:
    claims = {("default", f"d-{i}"): Claim("default", f"d-{i}", storage_class="ebs", uid=f"c{i}")
              for i in range(3)}  # fmt: skip
    members = [
        replace(_pod(f"w-{i}", f"d-{i}"), gang=pod("x", gang="w", min_available=2).gang)
        for i in range(2)
    ]
    snap = replace(
        snapshot([node("n0", cpu="8"), node("n1", cpu="8")], members),
        claims=claims,
        storage_classes={"ebs": StorageClass("ebs", WAIT_FOR_FIRST_CONSUMER, EBS)},
        csi_nodes={"n0": CsiNode("n0", {EBS: 1}), "n1": CsiNode("n1", {EBS: 1})},
    )
    result = schedule(snap, now=T0, config=Config(bind_volumes=True))
    placed = {b.pod.name: b.node for g in result.bindings for b in g.bindings}
    assert sorted(placed.values()) == ["n0", "n1"], "one volume a node: one member a node"
    third = replace(_pod("w-2", "d-2"), gang=pod("x", gang="w", min_available=3).gang)
    bigger = [replace(m, gang=third.gang) for m in members] + [third]
    result = schedule(replace(snap, pods=tuple(bigger)), now=T0, config=Config(bind_volumes=True))
    assert not result.bindings
    failed = {e.message for e in result.events if e.reason == "FailedScheduling"}
    assert any("2 node(s) exceed max volume count" in m for m in failed), failed


def test_an_attachment_of_the_new_pods_own_volume_still_counts_as_kube_scheduler_counts_it() -> (
    None
):
    """Only a volume a pod on the node uses is taken off the new pod's; one merely attached
    (its pod gone) counts beside it."""
    claims, volumes, classes = _world((EBS,))
    attachment = VolumeAttachment("va", "node", EBS, f"csi-{EBS}-0")
    assert limit_reason(
        EBS_ONE, csi_node=CsiNode("node", {EBS: 1}), others=[], attachments=[attachment],
        claims=claims, volumes=volumes, classes=classes,
    ) == MAX_VOLUME_COUNT  # fmt: skip
