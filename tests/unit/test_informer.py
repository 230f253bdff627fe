"""Our informer (``shell.watching.Informer``) against a real HTTP server on localhost that
plays the API server's part: it resumes a watch from the last version seen, lists again only
on 410 and then drops what vanished, survives broken streams, malformed objects and lines
too long for aiohttp's own reader, and counts a kind the server does not serve as listed."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from scheduler.cache.cluster import ClusterCache
from scheduler.model.owners import OwnerKind
from scheduler.shell.api import ApiClient
from scheduler.shell.health import keep_watch
from scheduler.shell.metrics import Metrics
from scheduler.shell.watching import Informer
from tests.unit.builders import SCHEDULER, node_manifest
from tests.unit.servers import server


def node(name: str, version: int, **kw: Any) -> dict[str, Any]:
    manifest = node_manifest(name, **kw)
    manifest["metadata"]["resourceVersion"] = str(version)
    return manifest


async def stream(request: web.Request, *events: dict[str, Any]) -> web.StreamResponse:
    """A watch answer: ``events``, one JSON object per line, then the end of the stream."""
    response = web.StreamResponse()
    await response.prepare(request)
    for event in events:
        await response.write(json.dumps(event).encode() + b"\n")
    await response.write_eof()
    return response


async def until(check: Callable[[], bool], *, seconds: float = 10) -> None:
    async with asyncio.timeout(seconds):
        while not check():
            await asyncio.sleep(0.01)


def nodes_in(cache: ClusterCache) -> set[str]:
    return set(cache.snapshot(whole=True).nodes)


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def inform(api: ApiClient, cache: ClusterCache, kind: str, **kw: Any) -> asyncio.Task[None]:
    informer = Informer(api, cache, kind=kind, poke=lambda: None, retry_seconds=0.01, **kw)
    return asyncio.create_task(informer.run())


def test_a_watch_resumes_from_the_last_version_and_lists_again_only_when_it_is_gone() -> None:
    """The first watch ends after n1 is added (as timeoutSeconds ends one): the next one
    asks for version 11, not a LIST. That one says 410: the LIST that follows no longer
    shows n0, which goes from the cache although no DELETED ever came."""
    asked: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        watching = request.query.get("watch") == "1"
        asked.append(f"watch@{request.query['resourceVersion']}" if watching else "list")
        if not watching:
            lists = asked.count("list")
            items = [node("n0", 10)] if lists == 1 else [node("n1", 11), node("n2", 20)]
            return web.json_response({"items": items, "metadata": {"resourceVersion": "10"}})
        if request.query["resourceVersion"] == "10":
            return await stream(request, {"type": "ADDED", "object": node("n1", 11)})
        if request.query["resourceVersion"] == "11":
            gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
            return await stream(request, {"type": "ERROR", "object": gone})
        await asyncio.sleep(0.5)  # the last watch stays open a while
        return web.Response()

    cache = ClusterCache(scheduler_name=SCHEDULER)

    async def scenario() -> None:
        async with server(handler) as api:
            task = await inform(api, cache, "nodes")
            await until(lambda: nodes_in(cache) == {"n1", "n2"})
            await stop(task)

    asyncio.run(scenario())
    assert asked[:4] == ["list", "watch@10", "watch@11", "list"]


def test_a_broken_stream_a_malformed_object_and_a_huge_line_do_not_stop_the_watch() -> None:
    """The server cuts the first stream mid-line (after one good event), then sends the
    deletion of an object with no name, a node whose annotations make a 300 KiB line and
    a deletion."""
    calls: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "1":
            calls.append("list")
            listing = {"items": [node("n0", 5)], "metadata": {"resourceVersion": "5"}}
            return web.json_response(listing)
        calls.append(request.query["resourceVersion"])
        if len(calls) == 2:  # a good event, then half of one and the connection goes
            response = web.StreamResponse()
            await response.prepare(request)
            await response.write(json.dumps({"type": "ADDED", "object": node("a", 6)}).encode())
            await response.write(b'\n{"type": "ADDED", "obj')
            request.transport.close()  # type: ignore[union-attr]
            return response
        if len(calls) == 3:
            huge = node("big", 8)
            huge["metadata"]["annotations"] = {"note": "x" * 300_000}
            return await stream(
                request,
                {"type": "DELETED", "object": {"metadata": {"resourceVersion": "7"}}},
                {"type": "ADDED", "object": huge},
                {"type": "DELETED", "object": node("n0", 9)},
            )
        await asyncio.sleep(0.5)
        return web.Response()

    cache = ClusterCache(scheduler_name=SCHEDULER)

    async def scenario() -> None:
        async with server(handler) as api:
            task = await inform(api, cache, "nodes")
            try:
                await until(lambda: nodes_in(cache) == {"a", "big"} and len(calls) >= 4)
            finally:
                await stop(task)

    asyncio.run(scenario())
    assert calls[:4] == ["list", "5", "6", "9"], "resumed where it was each time, no LIST"


def test_a_kind_the_server_does_not_serve_counts_as_listed_and_is_picked_up_once_served() -> None:
    served = [False]

    async def handler(request: web.Request) -> web.StreamResponse:
        if not served[0]:
            return web.json_response({"reason": "NotFound"}, status=404)
        if request.query.get("watch") != "1":
            group = {
                "metadata": {"name": "train", "namespace": "ns", "resourceVersion": "3"},
                "spec": {"minMember": 2},
            }
            return web.json_response({"items": [group], "metadata": {"resourceVersion": "3"}})
        await asyncio.sleep(0.5)
        return web.Response()

    cache = ClusterCache(scheduler_name=SCHEDULER)
    informer_listed: list[bool] = []

    async def scenario() -> None:
        async with server(handler) as api:
            informer = Informer(api, cache, kind="podgroups", poke=lambda: None)
            task = asyncio.create_task(informer.run())
            await asyncio.wait_for(informer.listed.wait(), 5)
            informer_listed.append(cache.snapshot(whole=True).podgroups == {})
            served[0] = True
            await until(lambda: bool(cache.snapshot(whole=True).podgroups))
            await stop(task)

    asyncio.run(scenario())
    assert informer_listed == [True], "not served: listed, and nothing in the cache"


def test_a_410_answer_to_the_watch_lists_again() -> None:
    asked: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "1":
            asked.append("list")
            items = [node("n0", 1)] if len(asked) == 1 else []
            return web.json_response({"items": items, "metadata": {"resourceVersion": "2"}})
        asked.append("watch")
        if asked.count("watch") == 1:
            return web.json_response({"reason": "Expired"}, status=410)
        await asyncio.sleep(0.5)
        return web.Response()

    cache = ClusterCache(scheduler_name=SCHEDULER)

    async def scenario() -> None:
        async with server(handler) as api:
            task = await inform(api, cache, "nodes")
            await until(lambda: asked.count("list") == 2 and not nodes_in(cache))
            await stop(task)

    asyncio.run(scenario())
    assert asked[:3] == ["list", "watch", "list"]


def test_a_watch_that_fails_again_and_again_from_one_version_lists_again() -> None:
    """A version the server keeps refusing with 5xx (say, "too large" after an etcd
    restore): after three failures the informer starts over with a LIST."""
    asked: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "1":
            asked.append("list")
            return web.json_response({"items": [], "metadata": {"resourceVersion": "2"}})
        asked.append("watch")
        return web.json_response({"reason": "Timeout"}, status=504)

    cache = ClusterCache(scheduler_name=SCHEDULER)

    async def scenario() -> None:
        async with server(handler) as api:
            task = await inform(api, cache, "nodes")
            await until(lambda: asked.count("list") == 2)
            await stop(task)

    asyncio.run(scenario())
    assert asked[:5] == ["list", "watch", "watch", "watch", "list"]


def test_a_watch_silent_past_its_own_timeout_is_given_up_and_resumed() -> None:
    """A connection that died without a word: the server would have ended the stream by
    timeoutSeconds; past that and a grace, the informer stops waiting on it."""
    watches: list[float] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "1":
            return web.json_response({"items": [], "metadata": {"resourceVersion": "2"}})
        watches.append(asyncio.get_running_loop().time())
        response = web.StreamResponse()
        await response.prepare(request)
        await asyncio.sleep(3)  # says nothing, ends nothing
        return response

    cache = ClusterCache(scheduler_name=SCHEDULER)

    async def scenario() -> None:
        async with server(handler) as api:
            informer = Informer(
                api, cache, kind="nodes", poke=lambda: None, timeout_seconds=0, grace_seconds=0.2
            )
            task = asyncio.create_task(informer.run())
            await until(lambda: len(watches) >= 2, seconds=2.5)
            await stop(task)

    asyncio.run(scenario())
    assert watches[1] - watches[0] < 1.5


def test_a_re_list_asked_while_a_list_runs_is_answered_by_a_list_begun_after_it() -> None:
    """A new leader asks for a LIST while the informer is in the middle of one: that LIST
    may predate the old leader's last bind, so only the next one answers."""
    lists: list[int] = []
    release = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") == "1":
            await asyncio.sleep(0.5)
            return web.Response()
        lists.append(1)
        if len(lists) == 1:
            await release.wait()
        return web.json_response({"items": [], "metadata": {"resourceVersion": "2"}})

    cache = ClusterCache(scheduler_name=SCHEDULER)
    lists_when_answered: list[int] = []

    async def scenario() -> None:
        async with server(handler) as api:
            informer = Informer(api, cache, kind="nodes", poke=lambda: None)
            task = asyncio.create_task(informer.run())
            await until(lambda: len(lists) == 1)
            answer = informer.relist()
            release.set()
            await asyncio.wait_for(answer, 5)
            lists_when_answered.append(len(lists))
            await stop(task)

    asyncio.run(scenario())
    assert lists_when_answered == [2]


def test_a_podgroup_kind_that_answers_404_for_a_moment_keeps_its_podgroups() -> None:
    """A restarting API server answers 404 for custom resources for a moment: the
    PodGroups stay; a kind that stays away past ``absent_seconds`` is dropped."""
    state = {"served": True, "lists": 0}
    group = {
        "metadata": {"name": "train", "namespace": "ns", "resourceVersion": "3"},
        "spec": {"minMember": 2},
    }

    async def handler(request: web.Request) -> web.StreamResponse:
        if not state["served"]:
            return web.json_response({"reason": "NotFound"}, status=404)
        if request.query.get("watch") == "1":
            await asyncio.sleep(0.2)
            return web.Response()
        state["lists"] += 1
        return web.json_response({"items": [group], "metadata": {"resourceVersion": "3"}})

    cache = ClusterCache(scheduler_name=SCHEDULER)
    seen: list[int] = []

    def podgroups() -> int:
        return len(cache.snapshot(whole=True).podgroups)

    async def scenario() -> None:
        async with server(handler) as api:
            informer = Informer(
                api, cache, kind="podgroups", poke=lambda: None, retry_seconds=0.02,
                absent_seconds=3.0,
            )  # fmt: skip
            task = asyncio.create_task(informer.run())
            await until(lambda: podgroups() == 1)
            state["served"] = False
            await asyncio.sleep(0.5)  # a moment of 404s
            seen.append(podgroups())
            state["served"] = True
            lists = state["lists"]
            await until(lambda: state["lists"] > lists)
            state["served"] = False  # for good
            await until(lambda: podgroups() == 0, seconds=10)
            await stop(task)

    asyncio.run(scenario())
    assert seen == [1], "kept through a moment of 404s"


def test_cancelling_the_informer_while_it_watches_ends_it() -> None:
    """A shutdown cancels the informer's task in the middle of a watch: it must end (a
    cancel taken for a re-list would keep it running, and the shutdown would hang)."""
    watching = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "1":
            return web.json_response({"items": [], "metadata": {"resourceVersion": "2"}})
        response = web.StreamResponse()
        await response.prepare(request)
        watching.set()
        await asyncio.sleep(1)
        return response

    cache = ClusterCache(scheduler_name=SCHEDULER)
    ended: list[bool] = []

    async def scenario() -> None:
        async with server(handler) as api:
            task = await inform(api, cache, "nodes")
            await asyncio.wait_for(watching.wait(), 5)
            await asyncio.sleep(0.05)
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=0.5)
            ended.append(task in done and task.cancelled())

    asyncio.run(scenario())
    assert ended == [True]


def test_an_informer_task_that_ended_even_cancelled_stops_the_process() -> None:
    """Only the shutdown cancels an informer, and it stops the health check first: any
    other end leaves a kind that never changes again, so the process must go."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response({"major": "1"})

    fatal: list[BaseException] = []

    async def scenario() -> None:
        async with server(handler) as api:
            informer = asyncio.create_task(asyncio.sleep(10), name="informer pods")
            informer.cancel()
            await asyncio.gather(informer, return_exceptions=True)
            check = keep_watch(
                api,
                metrics=Metrics.create(),
                watches=lambda: [informer],
                on_fatal=fatal.append,
                interval=0.01,
            )
            await asyncio.wait_for(check, 5)

    asyncio.run(scenario())
    assert "'informer pods' ended (cancelled)" in str(fatal[0])


def test_the_next_page_is_asked_for_before_this_one_is_folded_in() -> None:
    """The API server reads and encodes page 2 while we fold page 1: a LIST's pages no
    longer wait for each other's folding. The version is the LIST's."""
    from scheduler.shell.syncing import list_pages  # noqa: PLC0415

    seen: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        token = request.query.get("continue", "")
        seen.append(f"GET page {token or '1'}")
        following = {"": "2", "2": "3"}.get(token, "")
        items = [node(f"n-{token or '1'}-{i}", 1) for i in range(3)]
        return web.json_response(
            {"metadata": {"resourceVersion": "7", "continue": following}, "items": items}
        )

    async def scenario() -> str | None:
        async with server(handler) as api:

            async def each(items: list[dict[str, Any]]) -> None:
                await asyncio.sleep(0.2)  # folding takes a while; the next GET goes meanwhile
                seen.append(f"folded {items[0]['metadata']['name']}")

            return await list_pages(api, "nodes", each=each)

    assert asyncio.run(scenario()) == "7"
    assert seen == [
        "GET page 1", "GET page 2", "folded n-1-0", "GET page 3", "folded n-2-0", "folded n-3-0",
    ]  # fmt: skip


def test_a_paged_re_list_drops_what_vanished_only_after_its_last_page() -> None:
    """A re-list folds each page as it comes; what it no longer shows is dropped once the
    last page is in, never because it was not on the pages so far."""
    pages = iter([
        {"metadata": {"resourceVersion": "1"}, "items": [node("a", 1), node("b", 1)]},
        {"metadata": {"resourceVersion": "5", "continue": "x"}, "items": [node("b", 4)]},
        {"metadata": {"resourceVersion": "5"}, "items": [node("c", 5)]},
    ])  # fmt: skip

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "1":
            if "continue" in request.query:
                await asyncio.sleep(0.3)  # the last page is slow: look at the cache meanwhile
            return web.json_response(next(pages))
        if request.query["resourceVersion"] == "1":
            return web.json_response({"code": 410, "reason": "Expired"}, status=410)
        await asyncio.sleep(0.5)
        return await stream(request)

    async def scenario() -> list[set[str]]:
        cache = ClusterCache(scheduler_name=SCHEDULER)
        observed: list[set[str]] = []
        async with server(handler) as api:
            task = await inform(api, cache, "nodes")

            def look() -> bool:
                now = nodes_in(cache)
                if not observed or observed[-1] != now:
                    observed.append(now)
                return now == {"b", "c"}

            await until(look)
            await stop(task)
        return observed

    observed = asyncio.run(scenario())
    assert {"b"} not in observed, f"a dropped before the last page: {observed}"
    assert {"a", "b"} in observed
    assert observed[-1] == {"b", "c"}


def test_a_re_list_whose_later_page_fails_drops_nothing_and_is_done_again_whole() -> None:
    """A LIST that fails after its first page (a 500, the API server restarting) keeps
    what that page brought but drops nothing: only a LIST that got to its last page says
    what is gone. The informer lists again from the start."""
    answers = iter([
        web.json_response({"metadata": {"resourceVersion": "1"},
                           "items": [node("a", 1), node("b", 1), node("c", 1)]}),
        web.json_response({"metadata": {"resourceVersion": "5", "continue": "x"},
                           "items": [node("b", 4)]}),
        web.json_response({"code": 500, "reason": "InternalError"}, status=500),
        web.json_response({"metadata": {"resourceVersion": "6", "continue": "y"},
                           "items": [node("b", 4)]}),
        web.json_response({"metadata": {"resourceVersion": "6"},
                           "items": [node("c", 5), node("d", 6)]}),
    ])  # fmt: skip
    lists = 0

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal lists
        if request.query.get("watch") != "1":
            lists += 1
            if lists == 4:
                await asyncio.sleep(0.3)  # the LIST after the failure is slow: look meanwhile
            return next(answers)
        if request.query["resourceVersion"] == "1":
            return web.json_response({"code": 410, "reason": "Expired"}, status=410)
        await asyncio.sleep(0.5)
        return await stream(request)

    async def scenario() -> list[set[str]]:
        cache = ClusterCache(scheduler_name=SCHEDULER)
        observed: list[set[str]] = []
        async with server(handler) as api:
            task = await inform(api, cache, "nodes")

            def look() -> bool:
                now = nodes_in(cache)
                if not observed or observed[-1] != now:
                    observed.append(now)
                return now == {"b", "c", "d"}

            await until(look)
            await stop(task)
        assert cache.deliveries.stamps() == 0, "neither the failed LIST nor the next keeps any"
        return observed

    observed = asyncio.run(scenario())
    assert all("a" in seen for seen in observed if "d" not in seen and seen), observed
    assert observed[-1] == {"b", "c", "d"}


def test_an_owner_kind_refused_or_not_served_counts_as_listed_and_its_pods_get_no_gang() -> None:
    """JobSets answered 403 (RBAC leaves them out) and RayClusters answered 404 (CRD not
    installed): both informers are listed (the first pass must not wait for them), the
    cache counts both kinds as not served (their pods are placed as they come), and a
    kind that is served later is taken up again."""
    served_later: list[bool] = [False]

    async def handler(request: web.Request) -> web.StreamResponse:
        if "jobsets" in request.path:
            return web.json_response({"kind": "Status", "code": 403}, status=403)
        if not served_later[0]:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        if request.query.get("watch") == "1":
            await asyncio.sleep(0.5)
            return web.Response()
        return web.json_response({"items": [], "metadata": {"resourceVersion": "3"}})

    cache = ClusterCache(scheduler_name=SCHEDULER)

    async def scenario() -> frozenset[OwnerKind]:
        async with server(handler) as api:
            informers = [
                Informer(api, cache, kind=kind, poke=lambda: None, retry_seconds=0.01,
                         absent_seconds=0.2)
                for kind in ("jobsets", "rayclusters")
            ]  # fmt: skip
            tasks = [asyncio.create_task(i.run()) for i in informers]
            await until(lambda: all(i.listed.is_set() for i in informers))
            unserved = frozenset(OwnerKind) - cache.snapshot(whole=True).owner_kinds
            served_later[0] = True  # the RayCluster CRD is installed
            await until(
                lambda: OwnerKind.RAY_CLUSTER in cache.snapshot(whole=True).owner_kinds,
                seconds=5,
            )
            for task in tasks:
                await stop(task)
            return unserved

    unserved = asyncio.run(scenario())
    assert unserved == {OwnerKind.JOBSET, OwnerKind.RAY_CLUSTER}
    assert OwnerKind.JOBSET not in cache.snapshot(whole=True).owner_kinds


def test_compositepodgroups_refused_by_rbac_are_listed_empty_and_stop_no_other_kind() -> None:
    """A ClusterRole from before CompositePodGroups were read answers 403: the informer is
    listed (the first pass must not wait for it) with none, and a PodGroup that names one
    waits for it and says the ClusterRole may be why (the core's message)."""
    from scheduler.cache import kinds  # noqa: PLC0415

    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response({"kind": "Status", "code": 403}, status=403)

    cache = ClusterCache(scheduler_name=SCHEDULER)

    async def scenario() -> bool:
        async with server(handler) as api:
            informer = Informer(
                api, cache, kind=kinds.COMPOSITE_PODGROUPS.name, poke=lambda: None,
                retry_seconds=0.01, absent_seconds=0.2,
            )  # fmt: skip
            task = asyncio.create_task(informer.run())
            await until(informer.listed.is_set, seconds=5)
            await stop(task)
            return informer.listed.is_set()

    assert asyncio.run(scenario())
    assert cache.snapshot(whole=True).composites == {}


def test_queues_refused_or_not_served_mean_no_queues_until_the_crd_is_there() -> None:
    """Volcano's Queue answered 403 (RBAC leaves it out), then 404 (CRD not installed):
    the informer is listed (the first pass must not wait for it) and the cache has no
    queues (every gang competes on priority and age, #22); once the CRD is installed and
    a Queue listed, the cache has them."""
    answer: list[int] = [403]

    async def handler(request: web.Request) -> web.StreamResponse:
        if answer[0] != 200:
            return web.json_response({"kind": "Status", "code": answer[0]}, status=answer[0])
        if request.query.get("watch") == "1":
            await asyncio.sleep(0.5)
            return web.Response()
        item = {"metadata": {"name": "team-a", "uid": "q1"}, "spec": {"weight": 2}}
        return web.json_response({"items": [item], "metadata": {"resourceVersion": "3"}})

    cache = ClusterCache(scheduler_name=SCHEDULER)

    async def scenario() -> list[object]:
        seen: list[object] = []
        async with server(handler) as api:
            informer = Informer(
                api, cache, kind="queues", poke=lambda: None, retry_seconds=0.01,
                absent_seconds=0.2,
            )  # fmt: skip
            task = asyncio.create_task(informer.run())
            await until(informer.listed.is_set)
            seen.append(cache.queues)
            answer[0] = 404
            await asyncio.sleep(0.3)
            seen.append(cache.queues)
            answer[0] = 200  # the CRD is installed
            await until(lambda: bool(cache.queues), seconds=5)
            seen.append(sorted(cache.queues or {}))
            await stop(task)
        return seen

    assert asyncio.run(scenario()) == [None, None, ["team-a"]]


def test_a_kind_explain_may_not_read_lists_nothing_where_the_scheduler_would_stop() -> None:
    """``explain`` runs with the user's credentials, which may read less than the
    scheduler's: a 403 on PersistentVolumeClaims is an empty list for it (``readable_only``),
    while the scheduler, whose RBAC grants them, stops on it."""
    from scheduler.shell.api import ApiError  # noqa: PLC0415
    from scheduler.shell.syncing import list_versioned  # noqa: PLC0415

    async def forbidden(request: web.Request) -> web.StreamResponse:
        return web.json_response({"kind": "Status", "code": 403, "reason": "Forbidden"}, status=403)

    async def scenario(readable_only: bool) -> object:
        async with server(forbidden) as api:
            try:
                return await list_versioned(
                    api, "persistentvolumeclaims", readable_only=readable_only
                )
            except ApiError as error:
                return error.status

    assert asyncio.run(scenario(True)) == ([], None)
    assert asyncio.run(scenario(False)) == 403
