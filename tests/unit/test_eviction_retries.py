"""An eviction that finds no API server is sent again until it lands: the rest of the
victim gang is gone already, and no later pass would choose this pod again (chaos seed
7275 left a gang running with 1 of its minimum 4 when one of four evictions was sent while
the API server restarted). Against a real HTTP server on localhost."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from scheduler.model.decisions import Eviction
from scheduler.model.pods import PodRef
from scheduler.shell.patching import Patcher
from tests.unit.servers import server

VICTIM = Eviction(PodRef("ns", "victim", "u1"), "node-1", "preempted by ns/big", priority=1)


def _answering(answers: list[int], seen: list[str]):
    """A handler that answers each request with the next status of ``answers`` (the last
    one for good once they run out) and notes the method of each."""

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(request.method)
        status = answers.pop(0) if len(answers) > 1 else answers[0]
        return web.json_response({"reason": "x"} if status >= 400 else {}, status=status)

    return handler


def _evict(answers: list[int], **patcher: float) -> list[str]:
    seen: list[str] = []

    async def run() -> None:
        async with server(_answering(answers, seen)) as api:
            await Patcher(api, retries=0, evict_again_seconds=0.01, **patcher).evict([VICTIM])

    asyncio.run(asyncio.wait_for(run(), 10))
    return seen


def test_an_eviction_the_api_server_did_not_answer_is_sent_again_until_the_pod_is_deleted():
    # The condition patch fails twice (server unavailable), then it and the delete land.
    assert _evict([503, 503, 200]) == ["PATCH", "PATCH", "PATCH", "DELETE"]


def test_a_delete_that_failed_after_its_condition_landed_is_sent_again() -> None:
    assert _evict([200, 500, 200]) == ["PATCH", "DELETE", "DELETE"], "the mark stands"


def test_an_eviction_of_a_pod_gone_or_replaced_is_not_sent_again() -> None:
    assert _evict([404]) == ["PATCH"]
    assert _evict([200, 409]) == ["PATCH", "DELETE"], "another pod by that name (uid differs)"


def test_an_eviction_the_api_server_refused_is_not_sent_again() -> None:
    assert _evict([403]) == ["PATCH"], "a refusal is no outage: sending it again changes nothing"


def test_an_eviction_is_tried_for_a_bounded_time_only() -> None:
    seen = _evict([503], evict_for_seconds=0.2)
    assert 3 <= len(seen) <= 6, seen  # 0.01, 0.02, 0.04, 0.08 s apart, then past 0.2 s


def test_an_eviction_being_tried_again_gives_up_at_shutdown_so_that_draining_ends() -> None:
    seen: list[str] = []

    async def run() -> float:
        async with server(_answering([503], seen)) as api:
            patcher = Patcher(api, retries=0, evict_again_seconds=5.0)
            evicting = asyncio.create_task(patcher.evict([VICTIM]))
            while not seen:
                await asyncio.sleep(0.01)
            started = time.monotonic()
            patcher.close()
            await evicting
            return time.monotonic() - started

    assert asyncio.run(asyncio.wait_for(run(), 10)) < 1.0, "not its 5 s wait"
    assert seen == ["PATCH"]


def test_an_eviction_stops_once_the_lease_is_lost() -> None:
    held = [True]
    seen: list[str] = []

    async def run() -> None:
        async with server(_answering([503], seen)) as api:
            patcher = Patcher(api, retries=0, evict_again_seconds=0.01, fence=lambda: held[0])
            evicting = asyncio.create_task(patcher.evict([VICTIM]))
            while len(seen) < 2:
                await asyncio.sleep(0.005)
            held[0] = False
            await evicting

    asyncio.run(asyncio.wait_for(run(), 10))
    assert 2 <= len(seen) <= 3, "no eviction sent once the Lease is gone"


def test_an_eviction_decided_again_while_it_is_being_sent_is_sent_once() -> None:
    seen: list[str] = []

    async def run() -> None:
        async with server(_answering([503, 503, 200], seen)) as api:
            patcher = Patcher(api, retries=0, evict_again_seconds=0.05)
            await asyncio.gather(patcher.evict([VICTIM]), patcher.evict([VICTIM]))

    asyncio.run(asyncio.wait_for(run(), 10))
    assert seen == ["PATCH", "PATCH", "PATCH", "DELETE"], "one sender, not two"


MOVE = Eviction(PodRef("ns", "web", "u2"), "node-1", "Moved by consolidation", moved_to="node-2")
BUDGET = "Cannot evict pod as it would violate the pod's disruption budget."


def _move(answers: list[tuple[int, str]]) -> list[str]:
    """Send MOVE against a server answering ``answers`` (status, message) in turn; each
    request as METHOD PATH."""
    seen: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(f"{request.method} {request.path}")
        status, message = answers.pop(0) if len(answers) > 1 else answers[0]
        body = {"kind": "Status", "reason": "TooManyRequests", "message": message}
        return web.json_response(body if status >= 400 else {}, status=status)

    async def run() -> None:
        async with server(handler) as api:
            await Patcher(api, retries=0, evict_again_seconds=0.01).evict([MOVE])

    asyncio.run(asyncio.wait_for(run(), 10))
    return seen


def test_a_move_goes_through_the_eviction_api_and_a_budget_refusal_is_not_sent_again() -> None:
    eviction = "POST /api/v1/namespaces/ns/pods/web/eviction"
    assert _move([(201, "")]) == [eviction], "no condition patch, no plain delete"
    assert _move([(429, BUDGET)]) == [eviction], "the budget forbids it: the pod stays"
    overloaded = _move([(429, "Too many requests, please try again later."), (201, "")])
    assert overloaded == [eviction, eviction], "the API server's load passes: sent again"


def test_a_replica_that_is_no_longer_the_leader_sends_no_eviction() -> None:
    """Seed 8035: evictions waiting for a slot went out after the Lease had lapsed; the
    next leader finishes what was marked (the finish-evictions action)."""
    seen: list[str] = []

    async def run() -> None:
        async with server(_answering([200], seen)) as api:
            await Patcher(api, retries=0, fence=lambda: False).evict([VICTIM])

    asyncio.run(asyncio.wait_for(run(), 10))
    assert seen == []


def test_the_mark_begins_with_the_schedulers_name() -> None:
    bodies: list[dict] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.method == "PATCH":
            bodies.append(await request.json())
        return web.json_response({})

    async def run() -> None:
        async with server(handler) as api:
            await Patcher(api, retries=0, identity="gang-scheduler").evict([VICTIM])

    asyncio.run(asyncio.wait_for(run(), 10))
    [condition] = bodies[0]["status"]["conditions"]
    assert condition["message"] == "gang-scheduler: preempted by ns/big"


OTHER = Eviction(PodRef("ns", "other", "u3"), "node-1", "preempted by ns/big", priority=1)


def _evict_both(answers: list[int]) -> list[str]:
    seen: list[str] = []

    async def run() -> None:
        async with server(_answering(answers, seen)) as api:
            await Patcher(api, retries=0, evict_again_seconds=0.01).evict([VICTIM, OTHER])

    asyncio.run(asyncio.wait_for(run(), 10))
    return seen


def test_every_victim_of_a_pass_is_marked_before_any_is_deleted() -> None:
    """Seeds 9076, 9114: a stop between one victim's delete and another's mark left a gang's
    members deleted beside unmarked ones that nothing chose again."""
    assert _evict_both([200]) == ["PATCH", "PATCH", "DELETE", "DELETE"]


def test_no_victim_is_deleted_when_a_mark_of_the_pass_cannot_be_written() -> None:
    assert _evict_both([200, 403]) == ["PATCH", "PATCH"], "the marked one waits for the next pass"
