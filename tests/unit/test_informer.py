"""Our informer (``shell.watching.Informer``) against a real HTTP server on localhost that
plays the API server's part: it resumes a watch from the last version seen, lists again only
on 410 and then drops what vanished, survives broken streams, malformed objects and lines
too long for aiohttp's own reader, and counts a kind the server does not serve as listed."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from scheduler.cache.cluster import ClusterCache
from scheduler.shell.api import ApiClient, Credentials
from scheduler.shell.watching import Informer
from tests.unit.builders import SCHEDULER, node_manifest

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def server(handler: Handler) -> AsyncIterator[ApiClient]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    api = ApiClient(Credentials(server=f"http://127.0.0.1:{port}", verify=False))
    try:
        yield api
    finally:
        await api.close()
        await runner.cleanup()


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
    """The server cuts the first stream mid-line (after one good event), then sends a
    deletion of an object with no name, then a node whose annotations make a 300 KiB line, then a deletion."""
    calls: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "1":
            calls.append("list")
            return web.json_response({"items": [node("n0", 5)], "metadata": {"resourceVersion": "5"}})
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
                await until(lambda: nodes_in(cache) == {"a", "big"})
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
            informer = Informer(
                api, cache, kind="podgroups", poke=lambda: None, absent_seconds=0.05
            )
            task = asyncio.create_task(informer.run())
            await asyncio.wait_for(informer.listed.wait(), 5)
            informer_listed.append(cache.snapshot(whole=True).podgroups == {})
            served[0] = True
            await until(lambda: bool(cache.snapshot(whole=True).podgroups))
            await stop(task)

    asyncio.run(scenario())
    assert informer_listed == [True], "not served: listed, and nothing in the cache"
