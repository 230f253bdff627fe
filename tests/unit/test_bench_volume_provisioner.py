"""The bench's provisioner (bench/volumes.py), against a fake API server: it follows the
claims by a watch, makes each claim's volume once, on the node a scheduler chose, as the
testbed's provisioner writes it, several at once, and notes at which resourceVersion each
claim was first seen with a node chosen and first seen bound."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from bench.volumes import BIND_COMPLETED, Provisioning, volume_node
from testbed.provisioner import CLAIM_NAMESPACE_LABEL, SELECTED_NODE
from tests.unit.servers import server

CLASS = "ns-wffc"


def claim(name: str, version: int, *, node: str = "", volume: str = "", cls: str = CLASS) -> dict:
    annotations = {SELECTED_NODE: node} if node else {}
    if volume:
        annotations[BIND_COMPLETED] = "yes"
    spec = {"storageClassName": cls, "resources": {"requests": {"storage": "1Gi"}}}
    if volume:
        spec["volumeName"] = volume
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}",
                     "resourceVersion": str(version), "annotations": annotations},
        "spec": spec,
    }  # fmt: skip


def serve(listed: list[dict], events: list[dict], posted: list[dict], *, delay: float = 0.0):
    in_flight = [0, 0]  # now, most

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.method == "POST":
            in_flight[0] += 1
            in_flight[1] = max(in_flight)
            await asyncio.sleep(delay)
            in_flight[0] -= 1
            body = await request.json()
            posted.append(body)
            status = 409 if body["metadata"]["name"] == "pvc-u-taken" else 201
            return web.json_response(body, status=status)
        if request.query.get("watch") != "1":
            return web.json_response({"metadata": {"resourceVersion": "1"}, "items": listed})
        response = web.StreamResponse()
        await response.prepare(request)
        if request.query["resourceVersion"] == "1":
            for event in events:
                await response.write(json.dumps(event).encode() + b"\n")
        await asyncio.sleep(0.5)
        return response

    return handler, in_flight


async def provisioned(handler, until) -> Provisioning:
    async with server(handler) as api:
        provisioner = await Provisioning(api, "ns", CLASS).start().until_listed(timeout=10)
        try:
            for _ in range(200):
                if until(provisioner):
                    break
                await asyncio.sleep(0.02)
        finally:
            await provisioner.stop()
        return provisioner


def test_each_volume_is_made_once_on_the_node_chosen_for_its_claim() -> None:
    listed = [
        claim("a", 1),
        claim("b", 1, node="n-2", volume="pvc-u-b"),  # bound already: nothing to make
        claim("c", 1, node="n-3", cls="other"),  # not of the class
    ]
    events = [
        {"type": "MODIFIED", "object": claim("a", 5, node="n-1")},
        {"type": "MODIFIED", "object": claim("a", 6, node="n-1")},  # the PV controller's note
        {"type": "MODIFIED", "object": claim("a", 8, node="n-1", volume="pvc-u-a")},
    ]
    posted: list[dict] = []
    handler, _ = serve(listed, events, posted)
    provisioner = asyncio.run(provisioned(handler, lambda p: "a" in p.bound and posted))
    (volume,) = posted
    assert volume["metadata"]["name"] == "pvc-u-a"
    assert volume["metadata"]["labels"] == {CLAIM_NAMESPACE_LABEL: "ns"}
    assert volume["spec"]["claimRef"]["name"] == "a"
    assert volume_node(volume) == "n-1"
    assert provisioner.made == {"a": "n-1"}
    assert provisioner.errors == []
    assert (provisioner.selected["a"].version, provisioner.selected["a"].exact) == (5, True)
    assert (provisioner.bound["a"].version, provisioner.bound["a"].exact) == (8, True)
    assert provisioner.bound["b"].exact is False  # seen bound in the LIST: a later state


def test_volumes_are_made_several_at_once_and_one_made_already_is_no_error() -> None:
    names = [f"c{i}" for i in range(8)] + ["taken"]
    events = [{"type": "ADDED", "object": claim(n, 2 + i, node="n-1")} for i, n in enumerate(names)]
    posted: list[dict] = []
    handler, in_flight = serve([], events, posted, delay=0.2)
    provisioner = asyncio.run(provisioned(handler, lambda p: len(posted) == len(names)))
    assert sorted(provisioner.made) == sorted(names)
    assert len(posted) == len(names)
    assert in_flight[1] > 1, "made one at a time"
    assert provisioner.errors == []
