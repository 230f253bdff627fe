"""A claim left asking for its volume on a node by a replica that died mid-wait pins its gang
there for good unless someone takes the choice back: the pass releases this scheduler's own
choices once the wait a group may take is long over and no placed pod uses the claim; the
shell takes the annotation off only if the claim is as the pass saw it."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from aiohttp import web

from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.volumes import claim_from_dict
from scheduler.core.scheduling import schedule
from scheduler.core.volume_leftovers import GRACE_SECONDS, leftover_choices
from scheduler.model.config import Config
from scheduler.model.decisions import VolumeRelease
from scheduler.model.nodes import NodeInfo
from scheduler.model.times import format_time
from scheduler.model.volumes import WAIT_FOR_FIRST_CONSUMER, Claim, ClaimRef, StorageClass, Volume
from scheduler.shell.volume_binding import VolumeWriter
from tests.unit.builders import T0, node, pod, snapshot
from tests.unit.servers import server

HOST = "kubernetes.io/hostname"
US = "gang-scheduler"
TIMEOUT = 600.0
DUE = T0 + TIMEOUT + GRACE_SECONDS
MADE = StorageClass("made", WAIT_FOR_FIRST_CONSUMER, "example.com/provisioner")
CONFIG = Config(bind_volumes=True, volume_bind_timeout_seconds=TIMEOUT)


def _claim(*, by: str = US, at: float | None = T0, volume: str = "") -> Claim:
    return Claim(
        "default", "d-0", uid="c0", storage_class="made", requested=2**30,
        access_modes=frozenset({"ReadWriteOnce"}), selected_node="n0", selected_by=by,
        selected_at=at, volume=volume, resource_version="41",
    )  # fmt: skip


def _member(**kw: Any):
    volume = {"name": "d", "persistentVolumeClaim": {"claimName": "d-0"}}
    return pod("w-0", gang="w", min_available=1, cpu="3", spec={"volumes": [volume]}, **kw)


def _leftovers(claim: Claim, infos=(), now: float = DUE):
    return leftover_choices(
        {claim.key: claim}, infos, manager=US, timeout=TIMEOUT, now=now
    )  # fmt: skip


RELEASE = VolumeRelease("default", "d-0", uid="c0", node="n0", resource_version="41")


def test_our_choice_left_past_the_wait_and_its_grace_is_released() -> None:
    assert _leftovers(_claim()) == ((RELEASE,), None)


def test_a_choice_still_within_the_wait_is_kept_and_the_pass_wakes_when_it_falls_due() -> None:
    assert _leftovers(_claim(), now=DUE - 1) == ((), DUE)


def test_another_schedulers_choice_or_one_of_unknown_age_is_never_released() -> None:
    assert _leftovers(_claim(by="kube-scheduler")) == ((), None)
    assert _leftovers(_claim(at=None)) == ((), None)


def test_a_claim_whose_volume_was_made_is_left_to_its_binding() -> None:
    assert _leftovers(_claim(volume="pvc-c0")) == ((), None)


def test_a_choice_a_placed_pod_uses_is_kept_an_assumed_one_included() -> None:
    placed = NodeInfo.of("n0", node("n0"), (_member(node_name="n0"),))
    assert _leftovers(_claim(), infos=[placed]) == ((), None)


def test_a_gang_pinned_by_a_dead_replicas_choice_goes_elsewhere_once_it_is_released() -> None:
    """n0 is full since the choice was made: the gang fits only elsewhere, which the
    choice forbids until it is released."""
    nodes = [node(f"n{i}", cpu="4", labels={HOST: f"n{i}"}) for i in range(2)]
    filler = pod("filler", cpu="4", node_name="n0", scheduler="default-scheduler")
    pinned = replace(
        snapshot(nodes, [filler, _member()]),
        claims={("default", "d-0"): _claim()},
        storage_classes={"made": MADE},
    )
    before = schedule(pinned, now=DUE - 1, config=CONFIG)
    assert (before.bindings, before.volume_releases, before.wake_at) == ((), (), DUE)
    due = schedule(pinned, now=DUE, config=CONFIG)
    assert due.volume_releases == (RELEASE,)
    released = replace(pinned, claims={("default", "d-0"): replace(_claim(), selected_node=None)})
    after = schedule(released, now=DUE, config=CONFIG)
    [group] = after.bindings
    assert [(b.pod.name, b.node) for b in group.bindings] == [("w-0", "n1")]
    assert [(w.name, w.node) for w in group.volumes] == [("d-0", "n1")]


def test_who_wrote_the_selected_node_and_when_is_read_from_the_managed_fields() -> None:
    raw = {
        "metadata": {
            "name": "d-0", "namespace": "default", "uid": "c0",
            "annotations": {"volume.kubernetes.io/selected-node": "n0"},
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update",
                 "time": "2026-11-30T08:00:00Z",
                 "fieldsV1": {"f:metadata": {"f:annotations": {
                     "f:pv.kubernetes.io/bind-completed": {}}}}},
                {"manager": US, "operation": "Update", "time": format_time(T0),
                 "fieldsV1": {"f:metadata": {"f:annotations": {
                     "f:volume.kubernetes.io/selected-node": {}}}}},
            ],
        },
        "spec": {"storageClassName": "made"},
    }  # fmt: skip
    claim = claim_from_dict(raw)
    assert (claim.selected_by, claim.selected_at) == (US, T0)
    del raw["metadata"]["annotations"]["volume.kubernetes.io/selected-node"]
    assert (claim_from_dict(raw).selected_by, claim_from_dict(raw).selected_at) == ("", None)
    raw["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] = "n0"
    raw["metadata"]["managedFields"] = "hostile"
    assert (claim_from_dict(raw).selected_by, claim_from_dict(raw).selected_at) == ("", None)


Seen = list[tuple[str, str, dict, Any]]


def _releasing(status: int, *, leads: bool = True) -> Seen:
    seen: Seen = []

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else None
        seen.append((request.method, request.path, dict(request.query), body))
        return web.json_response({"reason": "Conflict"} if status >= 400 else {}, status=status)

    async def run() -> None:
        async with server(handler) as api:
            cache = ClusterCache(scheduler_name=US)
            writer = VolumeWriter(api, cache, manager="team-a-scheduler", fence=lambda: leads)
            await writer.release(RELEASE)

    asyncio.run(asyncio.wait_for(run(), 10))
    return seen


def test_a_release_takes_the_annotation_off_the_claim_as_the_pass_saw_it_under_our_name() -> None:
    [(method, path, query, body)] = _releasing(200)
    assert (method, path) == ("PATCH", "/api/v1/namespaces/default/persistentvolumeclaims/d-0")
    assert query == {"fieldManager": "team-a-scheduler"}
    assert body == {"metadata": {
        "uid": "c0", "resourceVersion": "41",
        "annotations": {"volume.kubernetes.io/selected-node": None},
    }}  # fmt: skip


def test_a_claim_changed_since_is_left_and_a_replica_that_does_not_lead_sends_nothing() -> None:
    assert len(_releasing(409)) == 1  # said once, never raised, never retried
    assert _releasing(200, leads=False) == []


def test_a_choice_this_pass_asks_for_again_is_not_released() -> None:
    """Room on the node it names came back: the gang goes there, its choice kept."""
    nodes = [node(f"n{i}", cpu="4", labels={HOST: f"n{i}"}) for i in range(2)]
    pinned = replace(
        snapshot(nodes, [_member()]),
        claims={("default", "d-0"): _claim()},
        storage_classes={"made": MADE},
    )
    result = schedule(pinned, now=DUE, config=CONFIG)
    [group] = result.bindings
    assert [(w.name, w.node) for w in group.volumes] == [("d-0", "n0")]
    assert result.volume_releases == ()


def test_a_claim_whose_volume_was_made_but_not_yet_bound_is_not_released() -> None:
    made = Volume("pvc-c0", claim=ClaimRef("default", "d-0", "c0"))
    due, _ = leftover_choices(
        {_claim().key: _claim()}, (), volumes=[made], manager=US, timeout=TIMEOUT, now=DUE
    )
    assert due == ()


def test_a_release_is_sent_once_however_many_passes_ask_for_it() -> None:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(request.method)
        return web.json_response({})

    async def run() -> None:
        async with server(handler) as api:
            writer = VolumeWriter(api, ClusterCache(scheduler_name=US))
            await writer.release(RELEASE)
            await writer.release(RELEASE)

    asyncio.run(asyncio.wait_for(run(), 10))
    assert seen == ["PATCH"]


def test_a_release_the_api_server_did_not_answer_is_sent_again_one_it_refused_is_not() -> None:
    seen: list[int] = []
    answers = iter([503, 200, 409])

    async def handler(request: web.Request) -> web.StreamResponse:
        status = next(answers)
        seen.append(status)
        return web.json_response({"reason": "x"}, status=status)

    async def run() -> None:
        async with server(handler) as api:
            writer = VolumeWriter(api, ClusterCache(scheduler_name=US))
            for _ in range(3):
                await writer.release(RELEASE)
            await writer.release(replace(RELEASE, resource_version="42"))
            await writer.release(replace(RELEASE, resource_version="42"))

    asyncio.run(asyncio.wait_for(run(), 30))
    assert seen == [503, 200, 409], "503 sent again, 200 once; a 409 not retried"
