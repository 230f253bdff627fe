"""The upstream PodGroup is listed, watched and written at the version the API server serves:
v1beta1 on Kubernetes 1.37 (never v1beta1 and v1alpha3 both: they are one object), v1alpha2
on 1.36, and where discovery cannot say, the 1.36 path, whose 404 counts as not served."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from aiohttp import web

from scheduler.cache.cluster import ClusterCache
from scheduler.model.gangs import PodGroupStatus
from scheduler.model.pods import GangKey, PodGroupApi
from scheduler.shell.discovery import served_path
from scheduler.shell.kinds import WORKLOAD_VERSIONS
from scheduler.shell.watching import Informer
from tests.unit.servers import server

DEFAULT = "/apis/scheduling.k8s.io/v1alpha2/podgroups"
GROUP = "/apis/scheduling.k8s.io"


def discovery(*served: str, without_podgroups: tuple[str, ...] = ()) -> dict[str, Any]:
    """What an API server serving the Workload API at ``served`` answers to discovery."""
    answers: dict[str, Any] = {
        GROUP: {"versions": [{"groupVersion": f"scheduling.k8s.io/{v}", "version": v}
                             for v in served]},
    }  # fmt: skip
    for version in served:
        names = ["workloads"] + ([] if version in without_podgroups else ["podgroups"])
        answers[f"{GROUP}/{version}"] = {"resources": [{"name": n} for n in names]}
    return answers


def _resolved(answers: dict[str, Any]) -> str:
    async def handler(request: web.Request) -> web.StreamResponse:
        if request.path in answers:
            return web.json_response(answers[request.path])
        return web.json_response({"kind": "Status", "code": 404}, status=404)

    async def run() -> str:
        async with server(handler) as api:
            return await served_path(api, DEFAULT, WORKLOAD_VERSIONS)

    return asyncio.run(asyncio.wait_for(run(), 10))


def test_kubernetes_1_37_is_read_at_v1beta1_never_at_v1alpha3_as_well() -> None:
    assert (
        _resolved(discovery("v1beta1", "v1alpha3")) == "/apis/scheduling.k8s.io/v1beta1/podgroups"
    )


def test_kubernetes_1_36_is_read_at_v1alpha2() -> None:
    assert _resolved(discovery("v1alpha2")) == DEFAULT


def test_a_version_that_serves_no_podgroups_is_passed_over() -> None:
    served = discovery("v1beta1", "v1alpha3", without_podgroups=("v1beta1",))
    assert _resolved(served) == "/apis/scheduling.k8s.io/v1alpha3/podgroups"


def test_without_the_workload_api_the_1_36_path_is_kept_and_its_404_says_not_served() -> None:
    assert _resolved({}) == DEFAULT
    assert _resolved({GROUP: {"versions": "hostile"}}) == DEFAULT


def _podgroup(version: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "train", "namespace": "ml", "uid": "u1",
                     "resourceVersion": str(version)},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }  # fmt: skip


def test_the_informer_lists_and_watches_v1beta1_and_the_gang_knows_its_version() -> None:
    answers = discovery("v1beta1", "v1alpha3")
    asked: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.path in answers:
            return web.json_response(answers[request.path])
        asked.append(f"{request.path}{'?watch' if request.query.get('watch') else ''}")
        if request.query.get("watch"):
            response = web.StreamResponse()
            await response.prepare(request)
            await asyncio.sleep(5)  # a watch with nothing to say
            return response
        # A LIST's items carry no apiVersion.
        return web.json_response({"items": [_podgroup(5)], "metadata": {"resourceVersion": "5"}})

    async def run() -> ClusterCache:
        cache = ClusterCache(scheduler_name="gang-scheduler")
        async with server(handler) as api:
            informer = Informer(api, cache, kind=PodGroupApi.WORKLOAD.kind, poke=lambda: None)
            task = asyncio.create_task(informer.run())
            async with asyncio.timeout(5):
                while "?watch" not in "".join(asked):
                    await asyncio.sleep(0.01)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return cache

    cache = asyncio.run(asyncio.wait_for(run(), 10))
    path = "/apis/scheduling.k8s.io/v1beta1/podgroups"
    assert asked == [path, f"{path}?watch"]
    found = cache.snapshot(whole=True).podgroups.get(GangKey("ml", "train"))
    assert found is not None
    assert (found.min_member, found.api_version) == (2, "scheduling.k8s.io/v1beta1")


def test_a_status_is_written_at_the_version_the_podgroup_was_read_at() -> None:
    from scheduler.model.decisions import StatusUpdate  # noqa: PLC0415
    from scheduler.shell.patching import Patcher  # noqa: PLC0415

    seen: list[tuple[str, str]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append((request.method, request.path))
        return web.json_response({})

    update = StatusUpdate(
        GangKey("ml", "train"), PodGroupStatus(), PodGroupApi.WORKLOAD, "scheduling.k8s.io/v1beta1"
    )

    async def run() -> None:
        async with server(handler) as api:
            await Patcher(api).status(update)

    asyncio.run(asyncio.wait_for(run(), 10))
    assert seen == [
        ("PATCH", "/apis/scheduling.k8s.io/v1beta1/namespaces/ml/podgroups/train/status")
    ]


def test_discovery_that_fails_otherwise_than_404_raises_rather_than_guess() -> None:
    """An API server starting answers 503: listing v1alpha2 then would take a 1.37 cluster's
    PodGroups for absent."""
    from scheduler.shell.api import ApiError  # noqa: PLC0415

    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response({"kind": "Status", "code": 503}, status=503)

    async def run() -> str:
        async with server(handler) as api:
            return await served_path(api, DEFAULT, WORKLOAD_VERSIONS)

    with pytest.raises(ApiError) as raised:
        asyncio.run(asyncio.wait_for(run(), 10))
    assert raised.value.status == 503


def test_a_placement_is_written_on_the_podgroup_at_the_version_it_was_read_at() -> None:
    from scheduler.model.decisions import GangBinding, Placement  # noqa: PLC0415
    from scheduler.shell.patching import Patcher  # noqa: PLC0415

    seen: list[tuple[str, str]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append((request.method, request.path))
        return web.json_response({})

    placement = Placement(
        ranks=(), tree="{}", retries=1, begin=0.0, podgroup=GangKey("ml", "train"),
        podgroup_api=PodGroupApi.WORKLOAD, podgroup_version="scheduling.k8s.io/v1beta1",
    )  # fmt: skip

    async def run() -> None:
        async with server(handler) as api:
            await Patcher(api).placement(GangBinding(GangKey("ml", "train"), (), placement), 0.1)

    asyncio.run(asyncio.wait_for(run(), 10))
    assert seen == [("PATCH", "/apis/scheduling.k8s.io/v1beta1/namespaces/ml/podgroups/train")]
