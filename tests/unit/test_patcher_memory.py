"""What the patcher remembers of the writes it sent (so as not to send them twice) stays
bounded by the objects the cache still holds: one entry per pod and gang ever written grew
the 2-hour soak's memory. Against a real HTTP server on localhost."""

from __future__ import annotations

import asyncio

from aiohttp import web

from scheduler.model.decisions import PodCondition
from scheduler.model.pods import PodRef
from scheduler.shell.patching import SWEEP_EVERY, Patcher
from tests.unit.servers import server


def _condition(i: int) -> PodCondition:
    return PodCondition(PodRef("ns", f"p{i}", f"u{i}"), "False", "Unschedulable", "no room", "")


def test_the_conditions_of_pods_gone_are_forgotten_and_those_of_pods_there_kept() -> None:
    alive = {"u0", "u1"}
    sent: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        sent.append(request.path)
        return web.json_response({})

    async def run() -> Patcher:
        async with server(handler) as api:
            patcher = Patcher(api, retries=0, pod_known=lambda ref: ref.uid in alive)
            for i in range(3 * SWEEP_EVERY):
                await patcher.condition(_condition(i))
            await patcher.condition(_condition(0))  # still there: not sent again
            return patcher

    patcher = asyncio.run(run())
    assert len(sent) == 3 * SWEEP_EVERY
    remembered = patcher._sent_conditions  # the memory under test
    assert len(remembered) < SWEEP_EVERY + 2, "swept as it grew"
    assert {PodRef("ns", "p0", "u0"), PodRef("ns", "p1", "u1")} <= set(remembered)
