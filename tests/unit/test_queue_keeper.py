"""The queue keeper (#22) when the API server does not do as asked: the default queue that
may not be made (403), exists already (409) or finds no answer (503); a status write that
finds its queue gone (404), is refused (422) or fails (500) for one queue and not the others;
a keeper that does not lead writes nothing. Against a real HTTP server on localhost."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from scheduler.cache.cluster import QUEUES, ClusterCache
from scheduler.codecs.objects import pod_from_dict
from scheduler.model import names
from scheduler.model.queues import QueueStatus
from scheduler.shell.api import ApiError
from scheduler.shell.metrics import Metrics
from scheduler.shell.queueing import QueueKeeper
from tests.unit.servers import server
from tests.unit.test_queues import queue


def _cache(*queue_names: str) -> ClusterCache:
    """Queues served, ``queue_names`` known, and one running pod of ours in each."""
    cache = ClusterCache(scheduler_name="gang-scheduler")
    cache.serve(QUEUES, True)
    for name in queue_names:
        cache.upsert_queue(queue(name), QueueStatus())
        cache.upsert_pod(
            pod_from_dict(
                {
                    "metadata": {
                        "name": f"p-{name}",
                        "namespace": "ml",
                        "uid": f"uid-{name}",
                        "labels": {names.QUEUE: name},
                    },
                    "spec": {
                        "schedulerName": "gang-scheduler",
                        "nodeName": "n0",
                        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                    },
                    "status": {"phase": "Running"},
                }
            )
        )
    return cache


def _play(
    cache: ClusterCache,
    answers: dict[tuple[str, str], list[int]],
    *,
    rounds: int = 1,
    leading: bool = True,
) -> tuple[list[tuple[str, str]], list[str]]:
    """``rounds`` rounds of the keeper against a server that answers (method, path) with the
    next status of ``answers`` (the last one again when they run out; 200 if none): the
    requests it got, and what each round raised."""
    seen: list[tuple[str, str]] = []
    raised: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        key = (request.method, request.path)
        seen.append(key)
        codes = answers.get(key, [200])
        code = codes.pop(0) if len(codes) > 1 else codes[0]
        body: dict[str, Any] = {"kind": "Status", "code": code, "message": f"said {code}"}
        if code < 300:
            body = {"metadata": {"name": request.path.split("/")[-1]}}
        return web.Response(status=code, text=json.dumps(body), content_type="application/json")

    async def run() -> None:
        async with server(handler) as api:
            keeper = QueueKeeper(api, cache, metrics=Metrics.create(), leading=lambda: leading)
            for _ in range(rounds):
                try:
                    await keeper.tend()
                except ApiError as error:
                    raised.append(str(error.status))

    asyncio.run(run())
    return seen, raised


QUEUES_PATH = "/apis/scheduling.volcano.sh/v1beta1/queues"
MAKE_DEFAULT = ("POST", QUEUES_PATH)


def _status_of(name: str) -> tuple[str, str]:
    return ("PATCH", f"{QUEUES_PATH}/{name}/status")


def test_a_default_queue_that_may_not_be_made_is_asked_for_once_and_the_statuses_still_go() -> None:
    seen, raised = _play(_cache("team-a"), {MAKE_DEFAULT: [403]}, rounds=2)
    assert seen.count(MAKE_DEFAULT) == 1  # RBAC says no: not asked again every round
    assert _status_of("team-a") in seen
    assert raised == []


def test_a_default_queue_that_exists_already_is_not_made_again() -> None:
    seen, raised = _play(_cache("team-a"), {MAKE_DEFAULT: [409]}, rounds=2)
    assert seen.count(MAKE_DEFAULT) == 1
    assert raised == []


def test_a_default_queue_the_api_server_did_not_answer_for_is_asked_for_again_next_round() -> None:
    # 503 three times (the call and its two retries), then made.
    seen, raised = _play(_cache("team-a"), {MAKE_DEFAULT: [503, 503, 503, 201]}, rounds=2)
    assert raised == ["503"]  # the round says so (run() logs it) and writes nothing more
    assert seen.count(MAKE_DEFAULT) == 4
    assert _status_of("team-a") in seen  # the next round made it, then wrote the status


def test_one_queues_status_that_fails_does_not_keep_the_others_from_being_written() -> None:
    cache = _cache("a-gone", "b-refused", "c-broken", "d-fine")
    answers = {
        _status_of("a-gone"): [404],
        _status_of("b-refused"): [422],
        _status_of("c-broken"): [500],
    }
    seen, raised = _play(cache, answers, rounds=2)
    assert raised == []
    assert seen.count(_status_of("d-fine")) == 2  # the test server does not echo the status
    assert seen.count(_status_of("b-refused")) == 2  # not written: tried again next round
    assert seen.count(_status_of("c-broken")) == 2 * 3  # each round: the call and 2 retries
    assert seen.count(_status_of("a-gone")) == 2


def test_a_keeper_that_does_not_lead_writes_nothing() -> None:
    seen, raised = _play(_cache("team-a"), {}, rounds=2, leading=False)
    assert seen == []
    assert raised == []


def test_a_queues_deserved_share_is_a_gauge_and_goes_with_the_queue() -> None:
    cache = _cache("team-a")
    cache.upsert_queue(queue("team-a", deserved={"cpu": "4", "nvidia.com/gpu": "2"}))
    metrics = Metrics.create()

    def deserved(resource: str) -> float | None:
        return metrics.registry.get_sample_value(
            "gang_scheduler_queue_deserved", {"queue": "team-a", "resource": resource}
        )

    async def answer(request: web.Request) -> web.StreamResponse:
        return web.json_response({"metadata": {"name": request.path.split("/")[-1]}})

    async def tend_twice() -> list[tuple[float | None, ...]]:
        async with server(answer) as api:
            keeper = QueueKeeper(api, cache, metrics=metrics, leading=lambda: True)
            await keeper.tend()
            seen = [(deserved("cpu"), deserved("nvidia.com/gpu"))]
            cache.remove_queue("team-a")
            await keeper.tend()
            return [*seen, (deserved("cpu"), deserved("nvidia.com/gpu"))]

    assert asyncio.run(tend_twice()) == [(4000, 2), (None, None)]
