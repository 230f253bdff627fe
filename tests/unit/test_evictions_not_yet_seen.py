"""The victims a pass chose are going from the moment the pass is applied until the watch
shows them going, or the eviction is known not to have been sent: the cache hands them to
the next passes as ``Snapshot.leaving``, and the Patcher says which of a pass's victims
stay. Against a real HTTP server on localhost for the Patcher."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from aiohttp import web

from scheduler.cache.cluster import ClusterCache
from scheduler.model.decisions import Eviction
from scheduler.shell.patching import Patcher
from tests.unit.builders import pod
from tests.unit.servers import server


def _cache_with_a_running_pod() -> tuple[ClusterCache, object]:
    cache = ClusterCache(scheduler_name="gang-scheduler")
    running = pod("v", gang="g", min_available=1, node_name="n0", phase="Running")
    cache.upsert_pod(running)
    return cache, running


def test_a_chosen_victim_is_leaving_until_the_watch_shows_it_deleting() -> None:
    cache, running = _cache_with_a_running_pod()
    cache.assume_leaving([running.ref.uid])
    assert cache.snapshot().leaving == {running.ref.uid}
    cache.upsert_pod(replace(running, phase="Running"))  # a status change, not yet the mark
    assert cache.snapshot().leaving == {running.ref.uid}
    cache.upsert_pod(replace(running, deleting=True))
    assert cache.snapshot().leaving == frozenset(), "the pod says it is going itself"


def test_a_chosen_victim_is_leaving_until_it_is_gone() -> None:
    cache, running = _cache_with_a_running_pod()
    cache.assume_leaving([running.ref.uid])
    cache.remove_pod(running.ref.uid)
    assert cache.snapshot().leaving == frozenset()


def test_a_victim_whose_eviction_was_not_sent_counts_as_running_again() -> None:
    cache, running = _cache_with_a_running_pod()
    cache.assume_leaving([running.ref.uid])
    cache.snapshot()  # the pass that follows
    cache.settle_leaving([running.ref.uid])
    assert cache.dirty, "its gang is looked at again"
    assert cache.snapshot().leaving == frozenset()


def test_a_pod_gone_or_finished_before_the_pass_was_applied_is_not_kept() -> None:
    cache, running = _cache_with_a_running_pod()
    cache.assume_leaving(["unknown"])
    cache.upsert_pod(replace(running, phase="Succeeded"))
    cache.assume_leaving([running.ref.uid])
    assert cache.snapshot().leaving == frozenset()


VICTIM = Eviction(pod("victim").ref, "n0", "preempted by default/big", priority=1)
OTHER = Eviction(pod("other").ref, "n0", "preempted by default/big", priority=1)
MOVED = Eviction(pod("moved").ref, "n0", "moved for default/big", priority=1, moved_to="n1")


BUDGET_REFUSAL = {
    "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "TooManyRequests",
    "code": 429,
    "message": "Cannot evict pod as it would violate the pod's disruption budget.",
}  # fmt: skip


def _staying(statuses: dict[tuple[str, str], int]) -> set[str]:
    """The Patcher's answer for three victims (one moved) when the API server answers
    each (method, pod name) with ``statuses`` (200 otherwise); a 429 to a move is the
    Eviction API's refusal for a PodDisruptionBudget, in its words."""

    async def handler(request: web.Request) -> web.StreamResponse:
        name = request.path.split("/")[6]
        status = statuses.get((request.method, name), 200)
        if status == 429:
            return web.json_response(BUDGET_REFUSAL, status=429)
        return web.json_response({"reason": "x"} if status >= 400 else {}, status=status)

    async def run() -> set[str]:
        async with server(handler) as api:
            patcher = Patcher(api, retries=0, evict_again_seconds=0.01)
            return await patcher.evict([VICTIM, OTHER, MOVED])

    return asyncio.run(asyncio.wait_for(run(), 10))


def test_every_victim_deleted_or_moved_stays_none() -> None:
    assert _staying({}) == set()


def test_a_move_its_budget_forbids_stays_and_so_does_one_refused_otherwise() -> None:
    """A pod whose move a PodDisruptionBudget refuses is neither marked nor deleted: left
    leaving, it would be no victim again for good (review of 06d03a4)."""
    assert _staying({("POST", "moved"): 429}) == {MOVED.pod.uid}
    assert _staying({("POST", "moved"): 403}) == {MOVED.pod.uid}


def test_a_mark_refused_keeps_every_marked_victim_of_the_pass() -> None:
    assert _staying({("PATCH", "other"): 403}) == {VICTIM.pod.uid, OTHER.pod.uid}


def test_a_delete_refused_stays_that_victim_only() -> None:
    assert _staying({("DELETE", "other"): 403}) == {OTHER.pod.uid}


def test_a_victim_found_gone_is_going_not_staying() -> None:
    """Gone already (404), or replaced by another pod of its name (409 on the uid
    precondition): until the watch shows it gone, the passes must not choose it again."""
    assert _staying({("DELETE", "other"): 404}) == set()
    assert _staying({("PATCH", "other"): 409}) == set()
    assert _staying({("POST", "moved"): 404}) == set()
