"""``make bench``: gang-scheduler against the bind ceiling, on the local control plane.

One run, one control plane (in ``.cluster-bench/``), 1,000 KWOK nodes, and in that order:

1. **Bind ceiling**: pods created for no scheduler, then bound by a trivial client that
   only POSTs bindings, round robin over the nodes, at the scheduler's bind concurrency.
2. **Backlog, gangs of 8** and 3. **backlog, single pods**: the pods are created while the
   scheduler is stopped; the clock starts when creation is complete and the scheduler is
   started, and stops at the last bind. pods/s is comparable with the ceiling.
4. **Latency, gangs of 8**: the scheduler runs while gangs are created at a steady rate the
   API server sustains (a creation storm measures the API server's queue, not us); for each
   gang, the time from its last member created to its last member bound (p50, p99).

The scheduler's peak RSS (VmHWM) is read at the end. Figures go to
``bench/results/gang-scheduling.{json,md}``; compare ratios within one run, never absolute
times across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from e2e import cluster as local_cluster
from e2e.nodes import api_client, create_nodes, layout, node_manifest, wait_ready
from scheduler.model import names
from scheduler.shell.api import ApiClient, ApiError, load_credentials

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
BENCH_DIR = REPO / ".cluster-bench"
SCHEDULER = "gang-scheduler"


def pod_manifest(name: str, *, scheduler: str, gang: str | None, size: int) -> dict:
    annotations = {}
    if gang is not None:
        annotations = {names.KOORD_NAME: gang, names.KOORD_MIN_AVAILABLE: str(size)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
            ],
        },
    }


@dataclass
class BindWatch:
    """Records, from a watch, when each pod was first seen bound."""

    api: ApiClient
    namespace: str
    bound_at: dict[str, float] = field(default_factory=dict)
    task: asyncio.Task | None = None

    async def _run(self) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods?watch=1"
        async for event in self.api.stream(path):
            pod = event.get("object", {})
            name = pod.get("metadata", {}).get("name")
            if name and pod.get("spec", {}).get("nodeName") and name not in self.bound_at:
                self.bound_at[name] = time.monotonic()

    def start(self) -> BindWatch:
        self.task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def wait_for(self, count: int, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.bound_at) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(self.bound_at)} of {count} pods bound in {timeout}s")
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


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
        await api.post(f"/api/v1/namespaces/{namespace}/pods", manifest)
        created[manifest["metadata"]["name"]] = time.monotonic()

    await gather_limited(concurrency, [create(i, m) for i, m in enumerate(manifests)])
    return created


async def fresh_namespace(api: ApiClient, name: str) -> str:
    await api.post("/api/v1/namespaces", {"metadata": {"name": name}})
    return name


async def clear_namespace(api: ApiClient, namespace: str, *, timeout: float = 300) -> None:
    """Delete every pod (KWOK removes the bound ones) and wait until they are gone. A
    DELETE of thousands of pods can outlast the client's 30 s timeout (the API server then
    stops where it was): it is sent again every few seconds until no pod is left."""
    deadline = time.monotonic() + timeout
    sent = 0.0
    while True:
        if time.monotonic() - sent > 5:
            with contextlib.suppress(TimeoutError):
                await api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods")
            sent = time.monotonic()
        left = len(
            (await api.request("GET", f"/api/v1/namespaces/{namespace}/pods?limit=1"))["items"]
        )
        if not left:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"pods in {namespace} not gone after {timeout}s")
        await asyncio.sleep(0.5)


def start_scheduler(kubeconfig: Path, log: Path, concurrency: int) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "scheduler", "run", "--kubeconfig", str(kubeconfig),
             "--bind-concurrency", str(concurrency)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip


def log_size(log: Path) -> int:
    return log.stat().st_size if log.exists() else 0


def longest_loop_lag_ms(log: Path, since: int) -> float | None:
    """The longest stretch the scheduler's event loop was held, as it logged on stopping
    (``event loop lag ... longest_milliseconds``), in the part of the log after ``since``."""
    with log.open("rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    found = re.findall(r"longest_milliseconds\W+([0-9.]+)", text)
    return float(found[-1]) if found else None


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=20)


async def bind_ceiling(api: ApiClient, nodes: list[str], *, pods: int, concurrency: int) -> dict:
    namespace = await fresh_namespace(api, "bench-ceiling")
    manifests = [pod_manifest(f"p-{i}", scheduler="nobody", gang=None, size=1) for i in range(pods)]
    await create_pods(api, namespace, manifests, concurrency=concurrency)

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
    elapsed = time.monotonic() - started
    await clear_namespace(api, namespace)
    return {"pods": pods, "seconds": round(elapsed, 2), "pods_per_second": round(pods / elapsed, 1)}


async def backlog(
    api: ApiClient, kubeconfig: Path, log: Path, *, name: str, pods: int, gang_size: int,
    concurrency: int,
) -> dict:  # fmt: skip
    namespace = await fresh_namespace(api, f"bench-{name}")
    manifests = [
        pod_manifest(
            f"p-{i}", scheduler=SCHEDULER,
            gang=f"g-{i // gang_size}" if gang_size > 1 else None, size=gang_size,
        )
        for i in range(pods)
    ]  # fmt: skip
    await create_pods(api, namespace, manifests, concurrency=concurrency)
    watch = BindWatch(api, namespace).start()
    started = time.monotonic()
    offset = log_size(log)
    scheduler = start_scheduler(kubeconfig, log, concurrency)
    try:
        await watch.wait_for(pods, timeout=600)
        rss = peak_rss_mib(scheduler.pid)
    finally:
        stop(scheduler)
        await watch.stop()
    elapsed = max(watch.bound_at.values()) - started
    binding = max(watch.bound_at.values()) - min(watch.bound_at.values())
    await clear_namespace(api, namespace)
    return {
        "pods": pods,
        "gang_size": gang_size,
        "seconds": round(elapsed, 2),
        "pods_per_second": round(pods / elapsed, 1),
        "first_to_last_bind_seconds": round(binding, 2),
        "pods_per_second_first_to_last_bind": round(pods / binding, 1),
        "scheduler_peak_rss_mib": round(rss, 1),
        "longest_event_loop_stretch_ms": longest_loop_lag_ms(log, offset),
    }


async def latency(
    api: ApiClient,
    kubeconfig: Path,
    log: Path,
    *,
    pods: int,
    gang_size: int,
    concurrency: int,
    rate: float,
) -> dict:
    namespace = await fresh_namespace(api, "bench-latency")
    offset = log_size(log)
    scheduler = start_scheduler(kubeconfig, log, concurrency)
    watch = BindWatch(api, namespace).start()
    try:
        await asyncio.sleep(3)  # let the scheduler list the cluster before the gangs come
        manifests = [
            pod_manifest(f"p-{i}", scheduler=SCHEDULER, gang=f"g-{i // gang_size}", size=gang_size)
            for i in range(pods)
        ]
        created = await create_pods(api, namespace, manifests, concurrency=concurrency, rate=rate)
        creation_complete = time.monotonic()
        await watch.wait_for(pods, timeout=600)
        rss = peak_rss_mib(scheduler.pid)
    finally:
        stop(scheduler)
        await watch.stop()
    per_gang = []
    for g in range(pods // gang_size):
        members = [f"p-{i}" for i in range(g * gang_size, (g + 1) * gang_size)]
        per_gang.append(max(watch.bound_at[m] for m in members) - max(created[m] for m in members))
    per_gang.sort()
    last_bind = max(watch.bound_at.values())
    await clear_namespace(api, namespace)
    return {
        "pods": pods,
        "gang_size": gang_size,
        "creation_rate_pods_per_second": rate,
        "creation_seconds": round(creation_complete - min(created.values()), 2),
        "drain_after_creation_seconds": round(max(last_bind - creation_complete, 0.0), 3),
        "gang_latency_p50_ms": round(statistics.median(per_gang) * 1000, 1),
        "gang_latency_p99_ms": round(per_gang[int(len(per_gang) * 0.99) - 1] * 1000, 1),
        "scheduler_peak_rss_mib": round(rss, 1),
        "longest_event_loop_stretch_ms": longest_loop_lag_ms(log, offset),
    }


def markdown(results: dict) -> str:
    ceiling = results["bind_ceiling"]["pods_per_second"]
    rows = [
        "| measurement | pods | pods/s (incl. start-up) | ratio | pods/s (first to last bind) "
        "| ratio | peak RSS MiB | longest event-loop stretch ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| bind ceiling (trivial client) | {results['bind_ceiling']['pods']} | {ceiling} | 1.00 "
        f"| {ceiling} | 1.00 | | |",
    ]
    for key, label in (
        ("gangs_of_8", "gang-scheduler, gangs of 8"),
        ("single_pods", "gang-scheduler, single pods"),
    ):
        r = results[key]
        steady = r["pods_per_second_first_to_last_bind"]
        rows.append(
            f"| {label} | {r['pods']} | {r['pods_per_second']} | "
            f"{r['pods_per_second'] / ceiling:.2f} | {steady} | {steady / ceiling:.2f} "
            f"| {r['scheduler_peak_rss_mib']} | {r.get('longest_event_loop_stretch_ms')} |"
        )
    lat = results["latency_gangs_of_8"]
    return "\n".join(
        [
            f"# gang-scheduler bench ({results['nodes']} KWOK nodes, bind concurrency "
            f"{results['concurrency']}, {results['machine']})",
            "",
            *rows,
            "",
            f"Latency, gangs of 8 created while the scheduler runs ({lat['pods']} pods at "
            f"{lat['creation_rate_pods_per_second']:g} pods/s): last member created to last "
            "member bound, "
            f"p50 {lat['gang_latency_p50_ms']} ms, p99 {lat['gang_latency_p99_ms']} ms; "
            f"the last bind came {lat['drain_after_creation_seconds']} s after creation ended; "
            f"peak RSS {lat['scheduler_peak_rss_mib']} MiB; the scheduler's event loop was "
            f"never held longer than {lat.get('longest_event_loop_stretch_ms')} ms.",
            "",
        ]
    )


async def main_async(args: argparse.Namespace) -> dict:
    plane = local_cluster.up(BENCH_DIR)
    try:
        racks = max(args.nodes // 50, 1)
        plan = layout(racks=racks, nodes_per_rack=args.nodes // racks, prefix="bench-node-")
        credentials = load_credentials(str(plane.kubeconfig))
        manifests = [node_manifest(n, cpu="64", memory="256Gi", gpu=8) for n in plan.nodes]
        create_nodes(api_client(plane.kubeconfig), manifests, workers=16)
        wait_ready(api_client(plane.kubeconfig), len(manifests))
        nodes = [n.name for n in plan.nodes]
        api = ApiClient(credentials, connections=args.concurrency + 8)
        log = BENCH_DIR / "logs" / "scheduler.log"
        try:
            results = {
                "machine": f"{os.cpu_count()} cores",
                "nodes": len(nodes),
                "concurrency": args.concurrency,
                "bind_ceiling": await bind_ceiling(
                    api, nodes, pods=args.pods, concurrency=args.concurrency
                ),
                "gangs_of_8": await backlog(
                    api, plane.kubeconfig, log, name="gangs", pods=args.pods, gang_size=8,
                    concurrency=args.concurrency,
                ),
                "single_pods": await backlog(
                    api, plane.kubeconfig, log, name="singles", pods=args.pods, gang_size=1,
                    concurrency=args.concurrency,
                ),
                "latency_gangs_of_8": await latency(
                    api, plane.kubeconfig, log, pods=args.latency_pods, gang_size=8,
                    concurrency=args.concurrency, rate=args.latency_rate,
                ),
            }  # fmt: skip
        finally:
            await api.close()
        ceiling = results["bind_ceiling"]["pods_per_second"]
        for key in ("gangs_of_8", "single_pods"):
            r = results[key]
            r["ratio_to_ceiling"] = round(r["pods_per_second"] / ceiling, 2)
            r["ratio_to_ceiling_first_to_last_bind"] = round(
                r["pods_per_second_first_to_last_bind"] / ceiling, 2
            )
        return results
    finally:
        local_cluster.down(BENCH_DIR)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--latency-pods", type=int, default=2000, help="pods created for the latency phase"
    )
    parser.add_argument(
        "--latency-rate",
        type=float,
        default=200,
        help="pods created per second in the latency phase: a load the API server sustains, "
        "so that the figure is the scheduler's and not a queue in front of the API server",
    )
    args = parser.parse_args(argv)
    try:
        results = asyncio.run(main_async(args))
    except (local_cluster.ClusterError, ApiError, TimeoutError) as error:
        traceback.print_exc()
        print(f"bench failed: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "gang-scheduling.json").write_text(json.dumps(results, indent=2) + "\n")
    table = markdown(results)
    (RESULTS / "gang-scheduling.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
