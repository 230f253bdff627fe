"""The claim writer against an HTTP server that keeps one ResourceClaim as the API server
does (merge patches, resourceVersion preconditions), and answers as told: a write that lands
but whose answer is lost is taken back; a claim whose allocation is still being written by
an earlier group is allocated by the next one rather than failed; and the cache keeps one
group's writes in flight when another group sharing the claim fails (review of #24)."""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import replace
from typing import Any

from aiohttp import web

from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.devices import resource_claim_from_dict
from scheduler.codecs.objects import pod_from_dict
from scheduler.model.config import Config
from scheduler.model.decisions import Binding, ClaimWrite, GangBinding, GroupBinding
from scheduler.model.devices import Allocation, DeviceId, DeviceResult, group_consumer
from scheduler.model.pods import GangKey, PodRef
from scheduler.shell.binding import Binder
from scheduler.shell.claiming import ClaimWriter
from scheduler.shell.metrics import Metrics
from scheduler.shell.recording import EventRecorder
from tests.unit.servers import server

GPU = Allocation(results=(DeviceResult("gpu", DeviceId("gpu.example.com", "n0", "gpu-0")),))
OTHER = {"devices": {"results": [
    {"request": "gpu", "driver": "gpu.example.com", "pool": "n0", "device": "gpu-1"}]}}  # fmt: skip


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


class Store:
    """One claim, patched as the API server patches it. ``lose_status_answers``: a status
    patch is applied, then answered 503 (the answer lost: it may have landed)."""

    def __init__(self, *, allocation: dict[str, Any] | None = None) -> None:
        self.claim: dict[str, Any] = {
            "metadata": {"name": "x", "namespace": "ns", "uid": "ux", "resourceVersion": "1"},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": 1}}]}},
            "status": {"allocation": allocation} if allocation else {},
        }  # fmt: skip
        self.lose_status_answers = False
        self.patches = 0

    async def handle(self, request: web.Request) -> web.Response:
        if request.method == "GET":
            return web.json_response(self.claim)
        body = json.loads(await request.read())
        wanted = body.get("metadata", {}).pop("resourceVersion", None)
        if wanted is not None and wanted != self.claim["metadata"]["resourceVersion"]:
            return web.json_response({"reason": "Conflict", "message": "modified"}, status=409)
        _merge(self.claim, body)
        version = int(self.claim["metadata"]["resourceVersion"]) + 1
        self.claim["metadata"]["resourceVersion"] = str(version)
        self.patches += 1
        if self.lose_status_answers and request.path.endswith("/status"):
            return web.json_response({"reason": "ServiceUnavailable"}, status=503)
        return web.json_response(self.claim)


def _cache(store: Store) -> ClusterCache:
    cache = ClusterCache(scheduler_name="gang")
    cache.upsert_resource_claim(resource_claim_from_dict(store.claim))
    return cache


def _write(pod: str, allocation: Allocation | None = GPU) -> ClaimWrite:
    return ClaimWrite("ns", "x", "ux", "1", allocation, (PodRef("ns", pod, f"u{pod}"),))


def test_a_write_whose_answer_is_lost_is_taken_back_whole() -> None:
    store = Store()
    store.lose_status_answers = True

    async def scenario() -> str:
        async with server(store.handle) as api:
            writer = ClaimWriter(api, _cache(store))
            written, error = await writer.write([_write("a")])
            store.lose_status_answers = False  # the API server answers again
            await writer.release(written)
            return error

    error = asyncio.run(scenario())
    assert "failed" in error
    status = store.claim["status"]
    assert not status.get("reservedFor")
    assert not status.get("allocation")
    assert "resource.kubernetes.io/delete-protection" not in store.claim["metadata"].get(
        "finalizers", []
    )


def test_a_claim_still_being_allocated_by_an_earlier_group_is_allocated_by_the_next() -> None:
    store = Store()  # the earlier group's write has not landed: no allocation yet

    async def scenario() -> str:
        async with server(store.handle) as api:
            _, error = await ClaimWriter(api, _cache(store)).write([_write("b")])
            return error

    assert asyncio.run(scenario()) == ""
    status = store.claim["status"]
    assert status["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    assert [r["name"] for r in status["reservedFor"]] == ["b"]


def test_a_claim_allocated_to_other_devices_meanwhile_stops_the_group() -> None:
    store = Store(allocation=OTHER)

    async def scenario() -> str:
        async with server(store.handle) as api:
            _, error = await ClaimWriter(api, _cache(store)).write([_write("a")])
            return error

    assert "got allocated elsewhere" in asyncio.run(scenario())
    assert store.patches == 0
    assert store.claim["status"]["allocation"] == OTHER


def test_one_group_failing_keeps_the_other_groups_write_to_the_same_claim_assumed() -> None:
    cache = _cache(Store())
    first, second = _write("a"), _write("b")
    cache.assume_claims([first])
    cache.assume_claims([second])
    cache.forget_claims([first])
    claim = cache.snapshot(whole=True).resource_claims[("ns", "x")]
    assert claim.allocation == GPU
    assert [c.name for c in claim.reserved_for] == ["b"]
    cache.forget_claims([second])
    assert cache.snapshot(whole=True).resource_claims[("ns", "x")].allocation is None


def test_a_release_is_tried_again_until_the_api_server_answers() -> None:
    store = Store()
    store.lose_status_answers = True
    down = [3]  # the next three requests find no API server

    async def handle(request: web.Request) -> web.Response:
        if down[0] > 0 and request.method == "GET":
            down[0] -= 1
            return web.json_response({"reason": "ServiceUnavailable"}, status=503)
        return await store.handle(request)

    async def scenario() -> list:
        async with server(handle) as api:
            writer = ClaimWriter(api, _cache(store))
            down[0] = 0
            written, _ = await writer.write([_write("a")])
            store.lose_status_answers = False
            down[0] = 3
            return await writer.release(written, patience=10)

    assert asyncio.run(scenario()) == [], "released on the fourth try"
    assert not store.claim["status"].get("allocation")


def test_a_release_the_api_server_never_answers_is_returned_not_dropped() -> None:
    """Chaos seed 7602 (I7): a claim's allocation landed with its answer lost, and the
    release found no API server. Forgotten, its devices went to another claim in the next
    pass: two claims held gpu-6 and gpu-7. The writer now says which it could not take
    back, and the binder keeps them assumed."""
    store = Store()
    store.lose_status_answers = True
    down = [False]

    async def handle(request: web.Request) -> web.Response:
        if down[0]:
            return web.json_response({"reason": "ServiceUnavailable"}, status=503)
        return await store.handle(request)

    async def scenario() -> list:
        async with server(handle) as api:
            writer = ClaimWriter(api, _cache(store))
            written, _ = await writer.write([_write("a")])
            down[0] = True
            return await writer.release(written, patience=0.3)

    (unreleased,) = asyncio.run(scenario())
    assert unreleased.write.allocation == GPU
    assert store.claim["status"]["allocation"], "it landed, and stands"


def test_an_unsure_write_stays_assumed_until_the_watch_shows_its_claim() -> None:
    store = Store()
    cache = _cache(store)
    write = _write("a")
    cache.assume_claims([write])
    cache.unsure_claims([write])
    assert cache.snapshot(whole=True).resource_claims[("ns", "x")].allocation == GPU
    # The watch shows the claim as it is: not allocated, so the write did not land.
    store.claim["metadata"]["resourceVersion"] = "7"
    cache.upsert_resource_claim(resource_claim_from_dict(store.claim))
    assert cache.snapshot(whole=True).resource_claims[("ns", "x")].allocation is None


def test_a_group_whose_claim_write_may_have_landed_and_cannot_be_released_keeps_it_assumed() -> (
    None
):
    """The binder's side of seed 7602: the allocation lands unanswered, the API server goes,
    the release cannot get through: the claim's devices stay taken for the next passes."""
    store = Store()
    store.lose_status_answers = True
    down = [False]

    async def handle(request: web.Request) -> web.Response:
        if down[0]:
            return web.json_response({"reason": "ServiceUnavailable"}, status=503)
        if request.method == "PATCH" and request.path.endswith("/status"):
            down[0] = True  # the API server goes right after this write lands
        return await store.handle(request)

    cache = _cache(store)
    member = pod_from_dict({"metadata": {"name": "a", "namespace": "ns", "uid": "ua"},
                            "spec": {"schedulerName": "gang"}})  # fmt: skip
    cache.upsert_pod(member)
    write = _write("a")
    group = GroupBinding(
        (GangBinding(GangKey("ns", "g"), (Binding(member.ref, "n0"),)),), claims=(write,)
    )

    async def scenario() -> None:
        async with server(handle) as api:
            binder = Binder(api, cache, EventRecorder(api, component="test"), config=Config(),
                            metrics=Metrics.create(), patience_seconds=0.3)  # fmt: skip
            binder.assume(group)
            await binder.apply(group)

    asyncio.run(scenario())
    assert store.claim["status"]["allocation"], "it landed"
    assert cache.snapshot(whole=True).resource_claims[("ns", "x")].allocation == GPU


def _group_write(*pods: str) -> ClaimWrite:
    refs = tuple(PodRef("ns", p, f"u{p}") for p in pods)
    return replace(
        ClaimWrite("ns", "x", "ux", "1", GPU, refs),
        groups=(group_consumer("train", "utrain"),),
        grouped=frozenset(r.uid for r in refs),
    )


def test_a_claim_a_podgroup_shares_is_reserved_once_for_the_group_and_taken_back_with_it() -> None:
    store = Store()

    async def scenario() -> tuple[list, list]:
        async with server(store.handle) as api:
            writer = ClaimWriter(api, _cache(store))
            written, error = await writer.write([_group_write("a", "b", "c")])
            assert error == ""
            reserved = list(store.claim["status"]["reservedFor"])
            await writer.release(written, [PodRef("ns", "a", "ua")])  # one member's bind failed
            kept = list(store.claim["status"].get("reservedFor") or [])
            await writer.release(written)  # the group's first bind failed: all of it
            return reserved, kept

    reserved, kept = asyncio.run(scenario())
    group = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train",
             "uid": "utrain"}  # fmt: skip
    assert reserved == [group]
    assert kept == [group]  # the others still use it
    assert not store.claim["status"].get("reservedFor")
    assert not store.claim["status"].get("allocation")


def test_a_group_already_reserved_is_not_added_again_nor_taken_back_by_a_later_write() -> None:
    store = Store(allocation=OTHER)
    store.claim["status"]["reservedFor"] = [
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train", "uid": "utrain"}
    ]

    async def scenario() -> None:
        async with server(store.handle) as api:
            writer = ClaimWriter(api, _cache(store))
            write = replace(_group_write("d"), allocation=None)
            written, error = await writer.write([write])
            assert error == ""
            await writer.release(written)

    asyncio.run(scenario())
    assert store.patches == 0
    assert len(store.claim["status"]["reservedFor"]) == 1


def test_a_group_write_whose_answer_is_lost_is_taken_back_whole() -> None:
    """Found in review: an unsure write did not count the group it may have reserved, so
    taking it back left the group's reservation and the allocation in place."""
    store = Store()
    store.lose_status_answers = True

    async def scenario() -> tuple[str, list]:
        async with server(store.handle) as api:
            writer = ClaimWriter(api, _cache(store))
            written, error = await writer.write([_group_write("a", "b")])
            store.lose_status_answers = False
            return error, await writer.release(written)

    error, left = asyncio.run(scenario())
    assert "failed" in error
    assert left == []
    assert not store.claim["status"].get("reservedFor")
    assert not store.claim["status"].get("allocation")


def test_a_group_reservation_left_with_none_of_its_members_bound_is_a_leftover() -> None:
    """After a crash between a group's claim write and its binds: the claim is reserved for
    the PodGroup, whose members all wait. Released before the first pass, as pods' are."""
    store = Store(allocation=OTHER)
    group = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train",
             "uid": "utrain"}  # fmt: skip
    store.claim["status"]["reservedFor"] = [group]
    cache = _cache(store)
    member = {
        "metadata": {"name": "train-0", "namespace": "ns", "uid": "ut0"},
        "spec": {"schedulerName": "gang", "schedulingGroup": {"podGroupName": "train"}},
        "status": {"phase": "Pending"},
    }
    cache.upsert_pod(pod_from_dict(member))
    ((claim, uids, groups),) = cache.leftover_claims()
    assert (claim.name, uids, [g.name for g in groups]) == ("x", frozenset(), ["train"])
    bound = {**member, "spec": {**member["spec"], "nodeName": "n0"}}
    cache.upsert_pod(pod_from_dict(bound))
    assert cache.leftover_claims() == []  # a member runs: the group's reservation is in use
