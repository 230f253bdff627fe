"""What the bench does to the API server and reads from it, beside watching: create and bind
pods at a bounded concurrency, make and clear namespaces, read the server's own counters,
and wait for it to settle between runs."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time

from bench.report import log
from scheduler.shell.api import ApiClient, ApiError


async def gather_limited(limit: int, coroutines: list) -> list:
    slots = asyncio.Semaphore(limit)

    async def one(coroutine):
        async with slots:
            return await coroutine

    return await asyncio.gather(*(one(c) for c in coroutines))


async def create_pods(
    api: ApiClient,
    namespace: str,
    manifests: list[dict],
    *,
    concurrency: int,
    rate: float | None = None,
) -> dict[str, float]:
    """Create pods (at most ``rate`` a second); returns when each creation was acknowledged."""
    created: dict[str, float] = {}
    start = time.monotonic()

    async def create(i: int, manifest: dict) -> None:
        if rate:
            await asyncio.sleep(max(start + i / rate - time.monotonic(), 0))
        await api.post(f"/api/v1/namespaces/{namespace}/pods", manifest, retries=3)
        created[manifest["metadata"]["name"]] = time.monotonic()

    await gather_limited(concurrency, [create(i, m) for i, m in enumerate(manifests)])
    return created


_namespaces = iter(range(1_000_000))


async def fresh_namespace(api: ApiClient, name: str) -> str:
    name = f"{name}-{next(_namespaces)}".replace("_", "-")
    await api.post("/api/v1/namespaces", {"metadata": {"name": name}})
    return name


async def clear_namespace(api: ApiClient, namespace: str, *, timeout: float = 300) -> None:
    """Delete every pod (KWOK removes the bound ones) and PodGroup, and wait until the pods
    are gone. A DELETE of thousands of pods can outlast the client's 30 s timeout (the API
    server then stops where it was): it is sent again every few seconds until none is left.
    ``timeout`` bounds a wait in which no pod goes, not the whole clearing: 60,000 pods at
    10,000 nodes took more than 300 s to go (session 35), and the figures measured before
    were lost with the error."""
    for path in (
        f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups",
        f"/apis/scheduling.k8s.io/v1alpha2/namespaces/{namespace}/podgroups",
    ):
        with contextlib.suppress(ApiError):
            await api.request("DELETE", path)
    deadline = time.monotonic() + timeout
    sent = 0.0
    fewest: int | None = None
    while True:
        if time.monotonic() - sent > 5:
            with contextlib.suppress(ApiError):
                await api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods")
            sent = time.monotonic()
        page = await api.request("GET", f"/api/v1/namespaces/{namespace}/pods?limit=1")
        more = (page.get("metadata") or {}).get("remainingItemCount") or 0
        left = len(page["items"]) + int(more)
        if not left:
            await settled(api)
            return
        if fewest is None or left < fewest:  # some went: the wait starts again
            fewest, deadline = left, time.monotonic() + timeout
        if time.monotonic() > deadline:
            raise TimeoutError(f"{left} pods in {namespace} not gone; none went for {timeout}s")
        await asyncio.sleep(0.5)


_SAMPLE = re.compile(r"^(apiserver_request_total|apiserver_watch_events_total)\{(.*)\} (\S+)$")


async def api_counts(api: ApiClient) -> dict[str, float]:
    """The API server's own counters: requests by verb and resource, watch events sent by
    kind. Their change over a run says what each pod cost the API server. (The text is not
    JSON: the client hands it back as the message of a payload it could not decode.)"""
    text = (await api.request("GET", "/metrics")).get("message", "")
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if not (match := _SAMPLE.match(line)):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match[2]))
        if match[1] == "apiserver_watch_events_total":
            key = f"watch-event {labels.get('resource') or labels.get('kind')}"
        else:
            sub = labels.get("subresource")
            key = f"{labels.get('verb')} {labels.get('resource')}{'/' + sub if sub else ''}"
        counts[key] = counts.get(key, 0.0) + float(match[3])
    return counts


async def settled(api: ApiClient, *, timeout: float = 60.0) -> None:
    """Until the API server has had no DELETE of a pod for half a second: KWOK removes a
    cleared namespace's pods for seconds after the namespace lists none, and would do it on
    the cores of the next run (a third of a DELETE per pod, seen after the ceiling's 5,000
    in bench.podgroups). Best effort: an API server that will not show its metrics (403,
    away) is not waited for, and the run goes on."""
    deadline = time.monotonic() + timeout
    try:
        last = (await api_counts(api)).get("DELETE pods", 0.0)
        while time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            now = (await api_counts(api)).get("DELETE pods", 0.0)
            if now == last:
                return
            last = now
    except ApiError as error:
        log(f"not waiting for the API server to settle: {error}")


async def bind_round_robin(
    api: ApiClient, namespace: str, *, nodes: list[str], pods: int, concurrency: int
) -> float:
    """The bind ceiling's client: pods p-0 ... p-N bound round robin over ``nodes`` by
    plain binding POSTs, ``concurrency`` in flight; the seconds it took."""

    async def bind(i: int) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": f"p-{i}", "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": nodes[i % len(nodes)]},
        }
        await api.post(f"/api/v1/namespaces/{namespace}/pods/p-{i}/binding", body)

    started = time.monotonic()
    await gather_limited(concurrency, [bind(i) for i in range(pods)])
    return time.monotonic() - started
