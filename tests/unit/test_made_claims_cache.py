"""The cache holds the devices of a claim being made for a pod's extended resources until
the watch shows it allocated (a claim is made first, allocated by a second write: between
the two its devices must stay taken), and lets them go with the pod or the claim."""

from __future__ import annotations

from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.devices import resource_claim_from_dict
from scheduler.model.decisions import ClaimWrite
from scheduler.model.devices import (
    Allocation,
    DeviceId,
    DeviceRequest,
    DeviceResult,
    SubRequest,
)
from scheduler.model.pods import PodRef
from tests.unit.builders import pod

GPU0 = DeviceId("gpu.example.com", "n0", "gpu-0")
REF = PodRef("default", "p", "uid-default-p")


def _write() -> ClaimWrite:
    request = DeviceRequest("r", exactly=SubRequest("r", "gpu", count=1))
    return ClaimWrite(
        namespace="default", name="<extended-resources>p", uid="", resource_version="",
        allocation=Allocation(results=(DeviceResult("r", GPU0),)), pods=(REF,),
        requests=(request,), mappings=(("main", "example.com/gpu", "r"),),
    )  # fmt: skip


def _made(*, allocated: bool) -> object:
    status = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "r",
                        "driver": GPU0.driver,
                        "pool": GPU0.pool,
                        "device": GPU0.device,
                    }
                ]
            }
        }
    }
    return resource_claim_from_dict({
        "metadata": {"name": "p-extended-resources-x", "namespace": "default", "uid": "c",
                     "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                     "ownerReferences": [{"kind": "Pod", "name": "p", "uid": REF.uid,
                                          "controller": True}]},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": status if allocated else {},
    })  # fmt: skip


def _held(cache: ClusterCache) -> set[DeviceId]:
    return {
        d
        for c in cache.snapshot().resource_claims.values()
        if c.allocation is not None
        for d in c.allocation.held
    }


def test_a_made_claim_shown_before_its_allocation_keeps_its_devices_taken() -> None:
    cache = ClusterCache(scheduler_name="gang-scheduler")
    cache.upsert_pod(pod("p"))
    cache.assume_claims([_write()])
    assert _held(cache) == {GPU0}
    cache.upsert_resource_claim(_made(allocated=False))
    assert _held(cache) == {GPU0}, "the allocation is still being written"
    cache.upsert_resource_claim(_made(allocated=True))
    assert _held(cache) == {GPU0}
    assert len(cache.snapshot().resource_claims) == 1, "the claim as the watch shows it"


def test_a_made_claims_devices_go_with_its_pod() -> None:
    cache = ClusterCache(scheduler_name="gang-scheduler")
    cache.upsert_pod(pod("p"))
    write = _write()
    cache.assume_claims([write])
    cache.unsure_claims([write])
    cache.remove_pod(REF.uid)
    assert _held(cache) == set()
