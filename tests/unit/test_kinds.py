"""Every kind the scheduler reads is one descriptor (``shell/kinds.py``), and a kind the
cache only keeps is one ``cache.kinds.Kind``: folded, re-listed and removed the same way as
every other, its store keyed as the API server's LIST names its objects, and a change of it
marking the next pass as the descriptor says."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.cache import kinds
from scheduler.cache.cluster import ClusterCache
from scheduler.cache.kinds import Change
from scheduler.shell.kinds import INFORMED, WATCHED
from scheduler.shell.syncing import fold_listing
from tests.unit.builders import SCHEDULER, T0

BODIES: dict[str, dict[str, Any]] = {
    "priorityclasses": {"metadata": {"name": "high"}, "value": 100},
    "persistentvolumeclaims": {
        "metadata": {"name": "data", "namespace": "ns"},
        "spec": {"storageClassName": "local"},
    },
    "persistentvolumes": {"metadata": {"name": "pv-1"}, "spec": {}},
    "storageclasses": {"metadata": {"name": "local"}, "volumeBindingMode": "Immediate"},
    "poddisruptionbudgets": {"metadata": {"name": "b", "namespace": "ns"}, "spec": {}},
    "resourceslices": {
        "metadata": {"name": "s"},
        "spec": {"driver": "gpu.example.com", "pool": {"name": "p"}, "nodeName": "n0"},
    },
    "deviceclasses": {"metadata": {"name": "gpu"}, "spec": {}},
    "csinodes": {
        "metadata": {"name": "n0"},
        "spec": {"drivers": [{"name": "ebs.csi.aws.com", "allocatable": {"count": 25}}]},
    },
    "volumeattachments": {
        "metadata": {"name": "csi-1"},
        "spec": {
            "attacher": "ebs.csi.aws.com",
            "nodeName": "n0",
            "source": {"persistentVolumeName": "pv-1"},
        },
    },
    "csidrivers": {"metadata": {"name": "lvm.example.com"}, "spec": {"storageCapacity": True}},
    "compositepodgroups": {
        "metadata": {"name": "root", "namespace": "ml"},
        "spec": {"schedulingPolicy": {"gang": {"minGroupCount": 2}}},
    },
    "csistoragecapacities": {
        "metadata": {"name": "cap-n0", "namespace": "kube-system"},
        "storageClassName": "local",
        "nodeTopology": {"matchLabels": {"kubernetes.io/hostname": "n0"}},
        "capacity": "100Gi",
    },
}
PLAIN = [kind for kind in kinds.STORED if kind.name in BODIES]


def test_every_kind_the_cache_keeps_plainly_is_read_by_a_descriptor_of_the_same_name() -> None:
    assert {kind.name for kind in kinds.STORED} <= set(WATCHED)
    assert set(BODIES) == {kind.name for kind in kinds.STORED if WATCHED[kind.name].informed}
    assert "topologies" not in INFORMED, "the ConfigMaps have a watch of their own"
    assert INFORMED[:2] == ("nodes", "pods")


@pytest.mark.parametrize("kind", PLAIN, ids=lambda kind: kind.name)
def test_a_plain_kind_is_folded_relisted_and_removed_by_its_descriptor(kind: kinds.Kind) -> None:
    watched, body = WATCHED[kind.name], BODIES[kind.name]
    cache = ClusterCache(scheduler_name=SCHEDULER)
    cache.snapshot(now=T0)  # a pass has run: nothing is due
    watched.fold(cache, body)
    key = watched.key_of(body)
    assert list(cache.stored(kind)) == [key]
    assert cache.dirty
    assert cache.gangs.everything is (kind.change is Change.EVERYTHING)
    cache.snapshot(now=T0)
    watched.fold(cache, body)
    assert not cache.dirty, "the same object again is no change"
    # A re-list that no longer shows it, begun after its delivery, removes it.
    since = cache.listing(kind.name)
    assert fold_listing(cache, kind.name, [], since=since) == [key]
    assert dict(cache.stored(kind)) == {}
    assert cache.dirty
    assert cache.gangs.everything is (kind.removal is Change.EVERYTHING)


def test_a_relist_begun_before_a_delivery_does_not_remove_what_the_watch_brought_since() -> None:
    cache = ClusterCache(scheduler_name=SCHEDULER)
    since = cache.listing("priorityclasses")
    WATCHED["priorityclasses"].fold(cache, BODIES["priorityclasses"])
    assert fold_listing(cache, "priorityclasses", [], since=since) == []
    assert list(cache.stored(kinds.PRIORITY_CLASSES)) == ["high"]


def test_a_plain_kind_reaches_the_snapshot_field_a_pass_reads() -> None:
    cache = ClusterCache(scheduler_name=SCHEDULER)
    for name, body in BODIES.items():
        WATCHED[name].fold(cache, body)
    snap = cache.snapshot(now=T0)
    assert snap.priority_classes["high"].value == 100
    assert ("ns", "data") in snap.claims
    assert "pv-1" in snap.volumes
    assert snap.storage_classes["local"].binding_mode == "Immediate"
    assert snap.csi_nodes["n0"].limits == {"ebs.csi.aws.com": 25}
    assert [(a.node, a.attacher, a.volume) for a in snap.volume_attachments] == [
        ("n0", "ebs.csi.aws.com", "pv-1")
    ]
    assert [b.name for b in snap.budgets] == ["b"]
    assert [s.name for s in snap.resource_slices] == ["s"]
    assert "gpu" in snap.device_classes
