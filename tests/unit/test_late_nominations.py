"""A nomination waits for a slot behind binds and Events; by the time it goes out its pod
may be bound (soak d233f5c: a pass nominated the 32 pods of a gang, the next bound it, and
the 32 nominations then went out and were refused, "may not be set on pods that are
already bound to a node"). A pod the cache holds placed gets no nomination."""

from __future__ import annotations

import asyncio

from aiohttp import web

from scheduler.cache.cluster import ClusterCache
from scheduler.model.decisions import Nomination
from scheduler.shell.patching import Patcher
from tests.unit.builders import SCHEDULER, pod
from tests.unit.servers import server


def nominations_sent(*, bound: bool = False, assumed: bool = False, node: str = "n1") -> list:
    cache = ClusterCache(scheduler_name=SCHEDULER)
    waiting = pod("p", node_name="n0" if bound else "", phase="Running" if bound else "Pending")
    cache.upsert_pod(waiting)
    if assumed:
        cache.assume(waiting.ref, "n0", by=SCHEDULER)
    sent: list = []

    async def handler(request: web.Request) -> web.StreamResponse:
        sent.append(await request.json())
        return web.json_response({})

    async def run() -> None:
        async with server(handler) as api:
            patcher = Patcher(api, retries=0, pod_placed=cache.placed)
            await patcher.nominate(Nomination(waiting.ref, node))

    asyncio.run(run())
    return sent


def test_a_pending_pod_is_nominated() -> None:
    assert nominations_sent() == [{"status": {"nominatedNodeName": "n1"}}]


def test_a_pod_bound_before_its_nomination_went_out_gets_none() -> None:
    assert nominations_sent(bound=True) == []


def test_a_pod_being_bound_gets_none() -> None:
    assert nominations_sent(assumed=True) == []


def test_a_bound_pods_nomination_is_still_cleared() -> None:
    """Clearing is allowed on a bound pod, and a stale one would mislead a reader."""
    assert nominations_sent(bound=True, node="") == [{"status": {"nominatedNodeName": None}}]
