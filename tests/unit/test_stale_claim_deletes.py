"""A claim an attempt that did not bind left is deleted by the next pass; an API server that
does not answer leaves it for the pass after, never an exception, never two deletes of one
claim at once. Against a real HTTP server on localhost."""

from __future__ import annotations

import asyncio

from aiohttp import web

from scheduler.shell.patching import Patcher
from tests.unit.servers import server


def _deleting(answers: list[int]) -> list[str]:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(request.method)
        status = answers.pop(0) if len(answers) > 1 else answers[0]
        body = {"metadata": {"name": "x", "namespace": "ns", "resourceVersion": "1"}}
        return web.json_response(body if status < 400 else {"reason": "x"}, status=status)

    async def run() -> None:
        async with server(handler) as api:
            patcher = Patcher(api, retries=0)
            await patcher.delete_made_claim("ns", "x")  # the API server away: no raise
            await asyncio.gather(
                patcher.delete_made_claim("ns", "x"), patcher.delete_made_claim("ns", "x")
            )

    asyncio.run(asyncio.wait_for(run(), 10))
    return seen


def test_a_leftover_claim_the_api_server_cannot_delete_now_is_tried_by_the_next_pass_once() -> None:
    seen = _deleting([503, 200])
    # First pass: the read fails (503), nothing more. Next pass, twice at once: one delete
    # (read, then DELETE: no finalizer to take off first).
    assert seen == ["GET", "GET", "DELETE"], seen
