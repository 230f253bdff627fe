"""A group's volume choices are written before any bind, as kube-scheduler's PreBind writes
them, and its pods wait until every claim is bound; a wait that cannot end well ends at
once with why, and what landed for claims not bound is taken back. Against a real HTTP
server on localhost; the watch's part is played by folding objects into the cache, as the
informers do."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from aiohttp import web

from scheduler.cache import kinds
from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.devices import resource_claim_from_dict
from scheduler.codecs.objects import pod_from_dict
from scheduler.model.config import Config
from scheduler.model.decisions import Binding, ClaimWrite, GangBinding, GroupBinding, VolumeWrite
from scheduler.model.devices import Allocation, DeviceId, DeviceResult
from scheduler.model.pods import GangKey, NodeSelectorTerm, PodRef, Requirement
from scheduler.model.volumes import Claim, ClaimRef, Volume
from scheduler.shell.binding import Binder
from scheduler.shell.metrics import Metrics
from scheduler.shell.recording import EventRecorder
from scheduler.shell.volume_binding import VolumeWriter
from tests.unit.builders import node
from tests.unit.servers import server

GPU = Allocation(results=(DeviceResult("gpu", DeviceId("gpu.example.com", "n1", "gpu-0")),))
GPU_CLAIM = {
    "metadata": {"name": "gpu", "namespace": "ml", "uid": "ug", "resourceVersion": "1"},
    "spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": 1}}]}},
}  # fmt: skip

POD = PodRef("ml", "w-0", "p0")
STATIC = VolumeWrite("ml", "d-0", "c0", POD, volume="pv-n1", resource_version="7")
MADE = VolumeWrite("ml", "d-0", "c0", POD, node="n1")
NODES = {POD: "n1"}
# What the API server answers a write with: the object at resourceVersion 10.
WRITTEN = {"metadata": {"resourceVersion": "10"}}


def _claim(version: int = 1, **kw: Any) -> Claim:
    return Claim("ml", "d-0", uid="c0", storage_class="local", resource_version=str(version), **kw)


def _volume(version: int = 1, **kw: Any) -> Volume:
    return Volume("pv-n1", storage_class="local", resource_version=str(version), **kw)


OURS = ClaimRef("ml", "d-0", "c0")


def _cache(*, claim: Claim | None = None, volume: Volume | None = None) -> ClusterCache:
    cache = ClusterCache(scheduler_name="gang-scheduler")
    cache.upsert_node(node("n1"))
    cache.upsert(kinds.PERSISTENT_VOLUME_CLAIMS, claim or _claim())
    cache.upsert(kinds.PERSISTENT_VOLUMES, volume or _volume())
    return cache


Seen = list[tuple[str, str, Any]]


def _recording(seen: Seen, answer: Callable[[str, str], tuple[int, Any]]):
    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else None
        seen.append((request.method, request.path, body))
        status, payload = answer(request.method, request.path)
        return web.json_response(payload, status=status)

    return handler


def _run(
    writes: tuple[VolumeWrite, ...],
    cache: ClusterCache,
    *,
    answer: Callable[[str, str], tuple[int, Any]] = lambda method, path: (200, WRITTEN),
    meanwhile: Callable[[ClusterCache], Awaitable[None]] | None = None,
    timeout: float = 5.0,
) -> tuple[list[VolumeWrite], str, Seen]:
    seen: Seen = []
    landed: list[VolumeWrite] = []

    async def run() -> str:
        async with server(_recording(seen, answer)) as api:
            writer = VolumeWriter(api, cache, timeout_seconds=timeout, poll_seconds=0.01)
            binding = asyncio.create_task(writer.bind(writes, nodes=NODES, landed=landed))
            if meanwhile is not None:
                await meanwhile(cache)
            return await binding

    error = asyncio.run(asyncio.wait_for(run(), 10))
    return landed, error, seen


async def _bound_after_a_while(cache: ClusterCache, *, volume: str = "pv-n1") -> None:
    """The watch shows what the PV controller does: the volume's claimRef (ours), then the
    claim bound."""
    await asyncio.sleep(0.03)
    cache.upsert(kinds.PERSISTENT_VOLUMES, _volume(10, claim=OURS))
    await asyncio.sleep(0.03)
    cache.upsert(kinds.PERSISTENT_VOLUME_CLAIMS, _claim(12, volume=volume, bind_completed=True))


def test_an_existing_volume_gets_its_claim_ref_and_the_pods_wait_for_the_binding() -> None:
    landed, error, seen = _run((STATIC,), _cache(), meanwhile=_bound_after_a_while)
    assert (landed, error) == ([STATIC], "")
    [(method, path, body)] = seen
    assert (method, path) == ("PATCH", "/api/v1/persistentvolumes/pv-n1")
    assert body["metadata"]["resourceVersion"] == "7", "no one else took it meanwhile"
    assert body["metadata"]["annotations"] == {"pv.kubernetes.io/bound-by-controller": "yes"}
    assert body["spec"]["claimRef"] == {
        "kind": "PersistentVolumeClaim", "apiVersion": "v1",
        "namespace": "ml", "name": "d-0", "uid": "c0",
    }  # fmt: skip


def test_a_watch_older_than_the_write_is_waited_for_not_read_as_a_reset() -> None:
    """kube-scheduler's checkBindings skips an object older than its write: the volume
    still shown without its claimRef is the watch behind, not the PV controller's reset."""

    async def late(cache: ClusterCache) -> None:
        await asyncio.sleep(0.05)  # the old object, claimRef unset, stays in view meanwhile
        await _bound_after_a_while(cache)

    assert _run((STATIC,), _cache(), meanwhile=late)[1] == ""


def test_a_claim_ref_reset_ends_the_wait_at_once() -> None:
    async def reset(cache: ClusterCache) -> None:
        await asyncio.sleep(0.02)
        cache.upsert(kinds.PERSISTENT_VOLUMES, _volume(11))

    error = _run((STATIC,), _cache(), meanwhile=reset, timeout=30)[1]
    assert error == "the claimRef of persistentvolume pv-n1 was reset"


def test_a_volume_to_be_made_is_asked_for_on_the_pods_node() -> None:
    async def provisioned(cache: ClusterCache) -> None:
        await asyncio.sleep(0.02)
        cache.upsert(kinds.PERSISTENT_VOLUME_CLAIMS, _claim(10, selected_node="n1"))
        cache.upsert(kinds.PERSISTENT_VOLUMES, Volume("pvc-made", claim=OURS))
        await asyncio.sleep(0.02)
        cache.upsert(
            kinds.PERSISTENT_VOLUME_CLAIMS,
            _claim(12, selected_node="n1", volume="pvc-made", bind_completed=True),
        )

    landed, error, seen = _run((MADE,), _cache(), meanwhile=provisioned)
    assert (landed, error) == ([MADE], "")
    [(method, path, body)] = seen
    assert (method, path) == ("PATCH", "/api/v1/namespaces/ml/persistentvolumeclaims/d-0")
    selected = {"volume.kubernetes.io/selected-node": "n1"}
    assert body == {"metadata": {"uid": "c0", "annotations": selected}}


def test_a_volume_made_out_of_the_nodes_reach_ends_the_wait() -> None:
    elsewhere = (NodeSelectorTerm((Requirement("kubernetes.io/hostname", "In", ("n9",)),)),)

    async def provisioned(cache: ClusterCache) -> None:
        await asyncio.sleep(0.02)
        cache.upsert(kinds.PERSISTENT_VOLUMES, Volume("pvc-made", node_affinity=elsewhere))
        cache.upsert(
            kinds.PERSISTENT_VOLUME_CLAIMS,
            _claim(12, selected_node="n1", volume="pvc-made", bind_completed=True),
        )

    error = _run((MADE,), _cache(), meanwhile=provisioned, timeout=30)[1]
    assert "pvc-made" in error
    assert "out of reach of node n1" in error


def test_a_volume_taken_since_the_pass_is_a_conflict_and_nothing_waits() -> None:
    landed, error, _ = _run((STATIC,), _cache(), answer=lambda m, p: (409, {"reason": "Conflict"}))
    assert landed == []
    assert "it changed since the pass saw it" in error


def test_a_provisioner_that_gives_the_claim_back_ends_the_wait_at_once() -> None:
    async def given_back(cache: ClusterCache) -> None:
        await asyncio.sleep(0.02)
        cache.upsert(kinds.PERSISTENT_VOLUME_CLAIMS, _claim(10, selected_node="n1"))
        await asyncio.sleep(0.05)
        cache.upsert(kinds.PERSISTENT_VOLUME_CLAIMS, _claim(11))

    landed, error, _ = _run((MADE,), _cache(), meanwhile=given_back, timeout=30)
    assert landed == [MADE]
    assert "provisioner gave it back" in error


def test_a_claim_deleted_or_bound_elsewhere_ends_the_wait() -> None:
    async def deleted(cache: ClusterCache) -> None:
        await asyncio.sleep(0.02)
        cache.remove(kinds.PERSISTENT_VOLUME_CLAIMS, "ml/d-0")

    assert "was deleted" in _run((STATIC,), _cache(), meanwhile=deleted, timeout=30)[1]
    elsewhere = _run((STATIC,), _cache(), meanwhile=lambda c: _bound_after_a_while(c, volume="x"))
    assert "was bound to x, not pv-n1" in elsewhere[1]

    async def taken(cache: ClusterCache) -> None:
        await asyncio.sleep(0.02)
        cache.upsert(kinds.PERSISTENT_VOLUMES, _volume(11, claim=ClaimRef("ml", "other", "c9")))

    assert "was taken by another claim" in _run((STATIC,), _cache(), meanwhile=taken)[1]


def test_claims_not_bound_in_time_end_the_wait() -> None:
    cache = _cache(volume=_volume(10, claim=OURS))
    landed, error, _ = _run((STATIC,), cache, timeout=0.1)
    assert landed == [STATIC]
    assert error == "1 of the group's persistentvolumeclaims were not bound within 0.1s"


def _taking_back(write: VolumeWrite, objects: dict[str, Any]) -> Seen:
    seen: Seen = []

    def answer(method: str, path: str) -> tuple[int, Any]:
        if method == "GET":
            return (200, objects[path]) if path in objects else (404, {"reason": "NotFound"})
        return 200, {}

    async def run() -> None:
        async with server(_recording(seen, answer)) as api:
            await VolumeWriter(api, _cache()).take_back([write])

    asyncio.run(asyncio.wait_for(run(), 10))
    return seen


CLAIM_PATH = "/api/v1/namespaces/ml/persistentvolumeclaims/d-0"
VOLUME_PATH = "/api/v1/persistentvolumes/pv-n1"


def test_taking_back_clears_the_selected_node_of_a_claim_not_bound_yet() -> None:
    claim = {"metadata": {"name": "d-0", "namespace": "ml", "uid": "c0", "resourceVersion": "3",
                          "annotations": {"volume.kubernetes.io/selected-node": "n1"}}}  # fmt: skip
    seen = _taking_back(MADE, {CLAIM_PATH: claim})
    assert [(m, p) for m, p, _ in seen] == [("GET", CLAIM_PATH), ("PATCH", CLAIM_PATH)]
    assert seen[1][2]["metadata"]["annotations"] == {"volume.kubernetes.io/selected-node": None}
    assert seen[1][2]["metadata"]["resourceVersion"] == "3"


def test_taking_back_frees_a_volume_whose_claim_is_not_bound_yet() -> None:
    claim = {"metadata": {"name": "d-0", "namespace": "ml", "uid": "c0"}}
    volume = {"metadata": {"name": "pv-n1", "resourceVersion": "8"},
              "spec": {"claimRef": {"namespace": "ml", "name": "d-0", "uid": "c0"}}}  # fmt: skip
    seen = _taking_back(STATIC, {CLAIM_PATH: claim, VOLUME_PATH: volume})
    assert [(m, p) for m, p, _ in seen] == [
        ("GET", CLAIM_PATH), ("GET", VOLUME_PATH), ("PATCH", VOLUME_PATH)
    ]  # fmt: skip
    assert seen[2][2] == {
        "metadata": {"resourceVersion": "8",
                     "annotations": {"pv.kubernetes.io/bound-by-controller": None}},
        "spec": {"claimRef": None},
    }  # fmt: skip


def test_a_claim_bound_meanwhile_keeps_its_volume_and_a_claim_gone_needs_nothing() -> None:
    bound = {"metadata": {"name": "d-0", "namespace": "ml", "uid": "c0",
                          "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
             "spec": {"volumeName": "pv-n1"}}  # fmt: skip
    assert [m for m, _, _ in _taking_back(STATIC, {CLAIM_PATH: bound})] == ["GET"]
    assert [m for m, _, _ in _taking_back(MADE, {})] == ["GET"]


PREBOUND = replace(STATIC, prebound=True)


def test_a_volume_made_for_its_claim_gets_no_write_and_the_pods_wait_for_the_binding() -> None:
    async def bound(cache: ClusterCache) -> None:
        await asyncio.sleep(0.03)
        cache.upsert(
            kinds.PERSISTENT_VOLUME_CLAIMS, _claim(12, volume="pv-n1", bind_completed=True)
        )

    cache = _cache(volume=_volume(7, claim=OURS))
    landed, error, seen = _run((PREBOUND,), cache, meanwhile=bound)
    assert (landed, error, seen) == ([PREBOUND], "", [])


def test_taking_back_leaves_a_volume_made_for_its_claim_to_the_claim() -> None:
    """Its provisioner made it for the claim: with its claimRef cleared, the claim would
    never get a volume (the provisioner makes one a claim) and another claim could take
    it."""
    volume = {"metadata": {"name": "pv-n1", "resourceVersion": "8"},
              "spec": {"claimRef": {"namespace": "ml", "name": "d-0", "uid": "c0"}}}  # fmt: skip
    claim = {"metadata": {"name": "d-0", "namespace": "ml", "uid": "c0"}}
    assert _taking_back(PREBOUND, {CLAIM_PATH: claim, VOLUME_PATH: volume}) == []


def test_taking_back_leaves_a_volume_the_pv_controller_is_binding() -> None:
    """The claim names the volume, the binding not marked complete yet: the claimRef
    cleared then would leave the claim naming a volume another claim may take."""
    claim = {"metadata": {"name": "d-0", "namespace": "ml", "uid": "c0"},
             "spec": {"volumeName": "pv-n1"}}  # fmt: skip
    assert [m for m, _, _ in _taking_back(STATIC, {CLAIM_PATH: claim})] == ["GET"]


def test_a_replica_that_no_longer_leads_writes_nothing() -> None:
    seen: Seen = []

    landed: list[VolumeWrite] = []

    async def run() -> str:
        async with server(_recording(seen, lambda m, p: (200, {}))) as api:
            writer = VolumeWriter(api, _cache(), fence=lambda: False)
            result = await writer.bind((STATIC,), nodes=NODES, landed=landed)
            await writer.take_back([STATIC])
            return result

    error = asyncio.run(asyncio.wait_for(run(), 10))
    assert landed == []
    assert "no longer holds the leader Lease" in error
    assert seen == []


# -- the binder: volumes first, then the binds ----------------------------------------------


def _group_run(
    answer: Callable[[str, str], tuple[int, Any]], *, devices: bool = False
) -> tuple[Seen, ClusterCache, list]:
    """A group of one pod whose claim takes pv-n1, through the Binder; the watch shows the
    claim bound as soon as the volume's claimRef is written. ``devices``: the pod has a
    ResourceClaim too, which the group allocates once its volumes are bound."""
    cache = _cache()
    member = pod_from_dict({"metadata": {"name": "w-0", "namespace": "ml", "uid": "p0"},
                            "spec": {"schedulerName": "gang-scheduler"}})  # fmt: skip
    cache.upsert_pod(member)
    claims: tuple[ClaimWrite, ...] = ()
    if devices:
        cache.upsert_resource_claim(resource_claim_from_dict(GPU_CLAIM))
        claims = (ClaimWrite("ml", "gpu", "ug", "1", GPU, (member.ref,)),)
    group = GroupBinding(
        (GangBinding(GangKey("ml", "w"), (Binding(member.ref, "n1"),)),), volumes=(STATIC,),
        claims=claims,
    )  # fmt: skip
    seen: Seen = []
    bound_when_bind_sent: list[bool] = []

    def answering(method: str, path: str) -> tuple[int, Any]:
        status, body = answer(method, path)
        if method == "PATCH" and path.endswith("/pv-n1") and status == 200:
            cache.upsert(kinds.PERSISTENT_VOLUMES, _volume(10, claim=OURS))
            cache.upsert(
                kinds.PERSISTENT_VOLUME_CLAIMS, _claim(11, volume="pv-n1", bind_completed=True)
            )
        if path.endswith("/binding"):
            claim = cache.claim("ml", "d-0")
            bound_when_bind_sent.append(claim is not None and claim.fully_bound)
        return status, body

    async def scenario() -> None:
        async with server(_recording(seen, answering)) as api:
            binder = Binder(api, cache, EventRecorder(api, component="test"), config=Config(),
                            metrics=Metrics.create())  # fmt: skip
            binder.assume(group)
            await binder.apply(group)

    asyncio.run(asyncio.wait_for(scenario(), 10))
    return seen, cache, bound_when_bind_sent


def test_a_group_binds_its_pods_only_once_every_claim_is_bound() -> None:
    seen, _, bound_when_bind_sent = _group_run(lambda m, p: (200, WRITTEN))
    paths = [p for m, p, _ in seen if m in ("PATCH", "POST") and "/events" not in p]
    assert paths == ["/api/v1/persistentvolumes/pv-n1", "/api/v1/namespaces/ml/pods/w-0/binding"]
    assert bound_when_bind_sent == [True]


def test_a_group_whose_volume_write_fails_binds_nothing_and_forgets_its_choices() -> None:
    seen, cache, _ = _group_run(
        lambda m, p: (409, {"reason": "Conflict"}) if "pv-n1" in p else (200, {})
    )
    assert not [p for _, p, _ in seen if p.endswith("/binding")]
    snapshot = cache.snapshot(whole=True)
    assert snapshot.in_flight == frozenset(), "the pod is pending again"
    assert snapshot.volumes["pv-n1"].claim is None, "the volume is free again"


def test_a_group_whose_volume_write_fails_leaves_its_devices_free() -> None:
    """Chaos seed 11066 (I4): a group's volume write failed (etcd restarting), so its
    ResourceClaims were never written; they stayed assumed allocated in the cache, and
    every later pass found them pinned to the node of the failed attempt ("resourceclaim
    not available on the node" everywhere else) until the scheduler restarted."""
    seen, cache, _ = _group_run(
        lambda m, p: (503, {"reason": "ServiceUnavailable"}) if "pv-n1" in p else (200, {}),
        devices=True,
    )
    assert not [p for _, p, _ in seen if "resourceclaims" in p], "no claim was written"
    claim = cache.snapshot(whole=True).resource_claims[("ml", "gpu")]
    assert claim.allocation is None, "its devices are free again"


def _interrupted_while_waiting(
    interrupt: Callable[[Binder, asyncio.Task[None]], None], *, begun: bool = True
) -> tuple[Seen, ClusterCache, bool]:
    """A group of one pod asking for a volume on n1, through the Binder, interrupted 0.2 s
    after the group began (``begun``; else its binder is told to stop waiting before it
    did); and whether it ended within 3 s of that."""
    cache = _cache()
    member = pod_from_dict({"metadata": {"name": "w-0", "namespace": "ml", "uid": "p0"},
                            "spec": {"schedulerName": "gang-scheduler"}})  # fmt: skip
    cache.upsert_pod(member)
    group = GroupBinding(
        (GangBinding(GangKey("ml", "w"), (Binding(member.ref, "n1"),)),), volumes=(MADE,)
    )
    asked = {"metadata": {"name": "d-0", "namespace": "ml", "uid": "c0", "resourceVersion": "10",
                          "annotations": {"volume.kubernetes.io/selected-node": "n1"}}}  # fmt: skip
    seen: Seen = []
    ended: list[bool] = []

    async def scenario() -> None:
        answer = lambda m, p: (200, asked if m == "GET" else WRITTEN)  # noqa: E731
        async with server(_recording(seen, answer)) as api:
            binder = Binder(api, cache, EventRecorder(api, component="test"), config=Config(),
                            metrics=Metrics.create())  # fmt: skip
            binder.assume(group)
            if not begun:
                binder.stop_waiting()
            applying = asyncio.create_task(binder.apply(group))
            await asyncio.sleep(0.2)  # written, and waiting for the claim to be bound
            interrupt(binder, applying)
            # Never bound: the watch shows nothing, as once a shutdown has stopped it.
            done, _ = await asyncio.wait([applying], timeout=3)
            ended.append(bool(done))

    asyncio.run(asyncio.wait_for(scenario(), 10))
    return seen, cache, ended == [True]


def _stop_waiting(binder: Binder, _: asyncio.Task[None]) -> None:
    binder.stop_waiting()


def _cancel(_: Binder, applying: asyncio.Task[None]) -> None:
    applying.cancel()


def test_a_group_cancelled_while_it_waits_for_its_volumes_takes_back_what_it_asked() -> None:
    """The Lease lost while this replica leads: the selected-node it wrote is taken off, so
    the claim is not left asked for on a node the gang may not get."""
    _taken_back(*_interrupted_while_waiting(_cancel))


def test_a_shutdown_stops_a_group_waiting_for_its_volumes_and_takes_back_what_it_asked() -> None:
    """Its watches cancelled, the cache would never show the claim bound: a shutdown used
    to wait out --volume-bind-timeout (10 min by default) for it."""
    _taken_back(*_interrupted_while_waiting(_stop_waiting))


def _taken_back(seen: Seen, cache: ClusterCache, ended: bool) -> None:
    assert ended, "the group was still waiting for its volumes 3 s after it was told to stop"
    writes = [(m, body) for m, p, body in seen if p.endswith("/persistentvolumeclaims/d-0")]
    assert [m for m, _ in writes] == ["PATCH", "GET", "PATCH"]
    assert writes[2][1]["metadata"]["annotations"] == {"volume.kubernetes.io/selected-node": None}
    assert not [p for _, p, _ in seen if p.endswith("/binding")], "nothing was bound"
    assert cache.snapshot(whole=True).in_flight == frozenset(), "the pod is pending again"


def test_a_group_that_had_not_begun_to_wait_when_the_shutdown_began_asks_for_nothing() -> None:
    seen, cache, ended = _interrupted_while_waiting(_stop_waiting, begun=False)
    assert ended
    assert seen == [], "no volume was asked for, no pod bound"
    assert cache.snapshot(whole=True).in_flight == frozenset(), "the pod is pending again"
