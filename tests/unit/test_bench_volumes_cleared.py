"""Before the next workload, a backlog with volumes' claims, volumes and StorageClass go
(bench/volumes.py's ``clear``): the bench's control plane runs no pvc- or pv-protection
controller, so their finalizers are taken off by the bench, and what a collection's DELETE
missed is deleted one by one; only the namespace's volumes, found by their label."""

from __future__ import annotations

import asyncio

from aiohttp import web

from bench.volumes import clear
from testbed.provisioner import CLAIM_NAMESPACE_LABEL
from tests.unit.servers import server

PROTECTION = ["kubernetes.io/pvc-protection"]


def test_claims_and_volumes_go_with_their_finalizers_taken_off() -> None:
    objects = {
        "/api/v1/namespaces/ns/persistentvolumeclaims/a-data": {"finalizers": PROTECTION},
        "/api/v1/namespaces/ns/persistentvolumeclaims/b-data": {},
        "/api/v1/persistentvolumes/pvc-a": {"finalizers": ["kubernetes.io/pv-protection"]},
    }
    requests: list[str] = []

    def delete(path: str) -> None:
        meta = objects[path]
        if meta.get("finalizers"):
            meta["deletionTimestamp"] = "now"
        else:
            del objects[path]

    async def handler(request: web.Request) -> web.StreamResponse:
        path, method = request.path, request.method
        requests.append(f"{method} {request.path_qs}")
        if method == "GET":
            items = [
                {"metadata": {"name": p.rsplit("/", 1)[1], **meta}}
                for p, meta in objects.items()
                if p.rsplit("/", 1)[0] == path
            ]
            return web.json_response({"items": items})
        if method == "DELETE" and path == "/api/v1/namespaces/ns/persistentvolumeclaims":
            for p in [p for p in objects if p.startswith(path)]:
                delete(p)
            return web.json_response({})
        if method == "DELETE" and path == "/api/v1/persistentvolumes":
            return web.json_response({"reason": "InternalError"}, status=500)
        if path not in objects:
            return web.json_response({"reason": "NotFound"}, status=404)
        if method == "PATCH":
            objects[path].pop("finalizers", None)
            if objects[path].get("deletionTimestamp"):
                del objects[path]
        elif method == "DELETE":
            delete(path)
        return web.json_response({})

    async def scenario() -> None:
        async with server(handler) as api:
            await clear(api, "ns", concurrency=4, timeout=10)

    asyncio.run(asyncio.wait_for(scenario(), 30))
    assert objects == {}
    selector = f"labelSelector={CLAIM_NAMESPACE_LABEL}%3Dns"
    assert f"GET /api/v1/persistentvolumes?{selector}" in requests
    assert "DELETE /api/v1/persistentvolumes/pvc-a" in requests  # the collection's DELETE failed
    assert requests[-1] == "DELETE /apis/storage.k8s.io/v1/storageclasses/ns-wffc"
