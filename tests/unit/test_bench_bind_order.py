"""The backlog with volumes' bind watch (bench/volumes.py's ``BindOrder``) notes where and at
which resourceVersion each pod was first seen bound: exactly, from a watch event (the
binding itself), or as a later state, from a LIST; and it still times binds as the bind
watch does."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from bench.volumes import BindOrder
from tests.unit.servers import server


def pod(name: str, version: int, node: str = "") -> dict:
    return {
        "metadata": {"name": name, "resourceVersion": str(version)},
        "spec": {"nodeName": node} if node else {},
    }


def test_a_bind_seen_in_a_watch_event_is_exact_and_one_seen_in_a_list_is_not() -> None:
    events = [
        {"type": "MODIFIED", "object": pod("b", 7, "n-2")},
        {"type": "MODIFIED", "object": pod("b", 9, "n-2")},  # KWOK's status: not the bind
        {"type": "MODIFIED", "object": pod("c", 11, "n-3")},
    ]

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "1":
            items = [pod("a", 3, "n-1"), pod("b", 2), pod("c", 2)]
            return web.json_response({"metadata": {"resourceVersion": "4"}, "items": items})
        response = web.StreamResponse()
        await response.prepare(request)
        if request.query["resourceVersion"] == "4":
            for event in events:
                await response.write(json.dumps(event).encode() + b"\n")
        await asyncio.sleep(0.5)
        return response

    async def scenario() -> BindOrder:
        async with server(handler) as api:
            watch = BindOrder(api, "bench").start()
            try:
                await watch.wait_for(3, timeout=10)
            finally:
                await watch.stop()
            return watch

    watch = asyncio.run(scenario())
    assert set(watch.bound_at) == {"a", "b", "c"}
    assert watch.nodes == {"a": "n-1", "b": "n-2", "c": "n-3"}
    assert {p: (s.version, s.exact) for p, s in watch.seen.items()} == {
        "a": (3, False), "b": (7, True), "c": (11, True),
    }  # fmt: skip
    assert watch.seen["b"].at == watch.bound_at["b"]
