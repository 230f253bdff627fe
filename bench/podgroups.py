"""The PodGroup path and start-up, against the bind ceiling, in one run.

``python -m bench.podgroups --nodes 100 --pods 400``: on a control plane of its own
(``.cluster-podgroups/``), N KWOK nodes, and in that order:

1. **Bind ceiling**: a trivial client POSTs bindings, round robin, at the bind concurrency.
2. **Backlog, gangs of 8 by PodGroup**: PodGroups and their pods are created while the
   scheduler is stopped; then it is started. pods/s first to last bind and from process
   start, the time from process start to the first bind, how many passes it ran and how
   many PodGroup writes reached the API server (MODIFIED events of the PodGroups), and what
   the API server was asked per pod (its own request and watch-event counters, from the
   scheduler's start to a second after the last bind; the ceiling's are printed beside).
3. **Latency, gangs of 8 by PodGroup**: gangs created at a steady rate while the scheduler
   runs; per gang, last member created to last member bound (p50, p99).

Compare ratios within one run, never absolute times across machines. Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from bench.apiserver import api_counts, bind_round_robin, gather_limited, settled
from bench.metering import cpu_seconds
from bench.schedulers import compile_bytecode
from scheduler.shell.api import ApiClient, ApiError, load_credentials
from testbed import cluster as local_cluster
from testbed.nodes import api_client, create_nodes, layout, node_manifest, wait_ready

REPO = Path(__file__).resolve().parent.parent
DIRECTORY = REPO / ".cluster-podgroups"
PODGROUPS = "/apis/scheduling.x-k8s.io/v1alpha1"
LABEL = "scheduling.x-k8s.io/pod-group"


def pod(name: str, *, scheduler: str, group: str | None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {LABEL: group} if group else {}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
            ],
        },
    }


def podgroup(name: str, size: int) -> dict:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": size},
    }


class Watch:
    """When each pod was first seen bound, and how many PodGroup updates came."""

    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.bound_at: dict[str, float] = {}
        self.podgroup_updates = 0
        self.tasks: list[asyncio.Task] = []

    async def _pods(self) -> None:
        async for event in self.api.stream(f"/api/v1/namespaces/{self.namespace}/pods?watch=1"):
            obj = event.get("object", {})
            name = obj.get("metadata", {}).get("name")
            if name and obj.get("spec", {}).get("nodeName") and name not in self.bound_at:
                self.bound_at[name] = time.monotonic()

    async def _podgroups(self) -> None:
        path = f"{PODGROUPS}/namespaces/{self.namespace}/podgroups?watch=1"
        async for event in self.api.stream(path):
            self.podgroup_updates += event.get("type") == "MODIFIED"

    async def start(self) -> Watch:
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._pods()), loop.create_task(self._podgroups())]
        await asyncio.sleep(0.5)  # both watches open before anything happens
        return self

    async def wait_for(self, count: int, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.bound_at) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(self.bound_at)} of {count} bound in {timeout}s")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def create_gangs(
    api: ApiClient, namespace: str, *, pods: int, size: int, rate: float | None = None
) -> dict[str, float]:
    """Each gang's PodGroup, then its pods; returns when each pod's creation was answered."""
    created: dict[str, float] = {}
    start = time.monotonic()

    async def gang(g: int) -> None:
        if rate:
            await asyncio.sleep(max(start + g * size / rate - time.monotonic(), 0))
        await api.post(f"{PODGROUPS}/namespaces/{namespace}/podgroups", podgroup(f"g-{g}", size))
        for i in range(g * size, (g + 1) * size):
            await api.post(
                f"/api/v1/namespaces/{namespace}/pods",
                pod(f"p-{i}", scheduler="gang-scheduler", group=f"g-{g}"),
            )
            created[f"p-{i}"] = time.monotonic()

    await gather_limited(32 // 8 * 2 if rate else 32, [gang(g) for g in range(pods // size)])
    return created


async def clear(api: ApiClient, namespace: str) -> None:
    """Delete the pods (KWOK removes bound ones) and PodGroups; again every 5 s until gone."""
    sent = 0.0
    while True:
        if time.monotonic() - sent > 5:
            for path in (
                f"/api/v1/namespaces/{namespace}/pods",
                f"{PODGROUPS}/namespaces/{namespace}/podgroups",
            ):
                # A collection DELETE of thousands of pods may outlast the client's 30 s: it
                # goes on in the API server, and the next round asks again.
                with contextlib.suppress(ApiError):
                    await api.request("DELETE", path)
            sent = time.monotonic()
        if not (await api.request("GET", f"/api/v1/namespaces/{namespace}/pods?limit=1"))["items"]:
            return
        await asyncio.sleep(0.5)


# ``--profile``: each scheduler run under py-spy, collapsed stacks into this directory.
PROFILE: list[Path] = []


def start_scheduler(
    kubeconfig: Path, log: Path, *, port: int, checkout: Path | None = None
) -> subprocess.Popen[bytes]:
    """This checkout's scheduler, or ``checkout``'s (its own .venv) for an A/B run."""
    checkout = checkout.resolve() if checkout else None
    python = str(checkout / ".venv" / "bin" / "python") if checkout else sys.executable
    wrap = []
    if PROFILE:
        out = PROFILE[0] / f"scheduler-{time.time():.0f}.txt"
        spy = str(Path(sys.executable).parent / "py-spy")
        wrap = [spy, "record", "--format", "raw", "--rate", "200", "-o", str(out), "--"]
    with log.open("ab") as out:
        return subprocess.Popen(
            [*wrap, python, "-m", "scheduler", "run", "--kubeconfig", str(kubeconfig),
             "--bind-concurrency", "32", "--metrics-port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=checkout,
        )  # fmt: skip


def passes(port: int) -> int:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith("gang_scheduler_pass_duration_seconds_count"):
            return int(float(line.split()[-1]))
    return -1


def per_pod(before: dict[str, float], after: dict[str, float], pods: int) -> dict[str, float]:
    """What changed, per pod, leaving out what changed by less than one in a hundred pods."""
    changes = {k: (v - before.get(k, 0.0)) / pods for k, v in after.items()}
    return {k: round(v, 2) for k, v in sorted(changes.items()) if v >= 0.01}


def stop(process: subprocess.Popen[bytes]) -> None:
    if PROFILE:  # stop the scheduler, not py-spy: it writes its profile once that exits
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        for child in children:
            subprocess.run(["kill", "-TERM", child], check=False)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


async def ceiling(api: ApiClient, nodes: list[str], *, pods: int) -> float:
    namespace = f"ceiling-{time.time():.0f}"
    await api.post("/api/v1/namespaces", {"metadata": {"name": namespace}})
    await gather_limited(
        32,
        [
            api.post(
                f"/api/v1/namespaces/{namespace}/pods", pod(f"p-{i}", scheduler="x", group=None)
            )
            for i in range(pods)
        ],
    )

    before = await api_counts(api)
    rate = pods / await bind_round_robin(api, namespace, nodes=nodes, pods=pods, concurrency=32)
    await asyncio.sleep(1)  # KWOK's status writes of the last pods, as in a backlog run
    print(f"ceiling, API server per pod: {per_pod(before, await api_counts(api), pods)}",
          file=sys.stderr)  # fmt: skip
    await clear(api, namespace)
    await settled(api)
    return rate


async def backlog(
    api: ApiClient,
    kubeconfig: Path,
    log: Path,
    *,
    pods: int,
    name: str,
    checkout: Path | None = None,
) -> dict:
    namespace = name
    await api.post("/api/v1/namespaces", {"metadata": {"name": namespace}})
    await create_gangs(api, namespace, pods=pods, size=8)
    watch = await Watch(api, namespace).start()
    port = local_cluster.free_port()
    before = await api_counts(api)
    started = time.monotonic()
    scheduler = start_scheduler(kubeconfig, log, port=port, checkout=checkout)
    try:
        await watch.wait_for(pods, timeout=600)
        cpu = cpu_seconds(scheduler.pid) if not PROFILE else None
        await asyncio.sleep(1)  # the status writes of the last gangs
        count = passes(port)
        requests = per_pod(before, await api_counts(api), pods)
    finally:
        stop(scheduler)
        await watch.stop()
    first, last = min(watch.bound_at.values()), max(watch.bound_at.values())
    print(f"{namespace}: all bound; clearing", file=sys.stderr)
    await clear(api, namespace)
    await settled(api)
    return {
        "pods_per_second_first_to_last": pods / (last - first),
        "pods_per_second_from_start": pods / (last - started),
        "start_to_first_bind_seconds": round(first - started, 2),
        "passes": count,
        "podgroup_updates": watch.podgroup_updates,
        "cpu_seconds_to_last_bind": cpu,
        "api_server_per_pod": requests,
    }


async def latency(api: ApiClient, kubeconfig: Path, log: Path, *, pods: int, rate: float) -> dict:
    namespace = f"latency-{time.time():.0f}"
    await api.post("/api/v1/namespaces", {"metadata": {"name": namespace}})
    port = local_cluster.free_port()
    scheduler = start_scheduler(kubeconfig, log, port=port)
    watch = await Watch(api, namespace).start()
    try:
        await asyncio.sleep(4)  # past the start-up
        created = await create_gangs(api, namespace, pods=pods, size=8, rate=rate)
        await watch.wait_for(pods, timeout=600)
        count = passes(port)
    finally:
        stop(scheduler)
        await watch.stop()
    per_gang = sorted(
        max(watch.bound_at[f"p-{i}"] for i in range(g * 8, g * 8 + 8))
        - max(created[f"p-{i}"] for i in range(g * 8, g * 8 + 8))
        for g in range(pods // 8)
    )
    await clear(api, namespace)
    return {
        "p50_ms": round(statistics.median(per_gang) * 1000, 1),
        "p99_ms": round(per_gang[max(int(len(per_gang) * 0.99) - 1, 0)] * 1000, 1),
        "passes": count,
    }


async def main_async(args: argparse.Namespace) -> dict:
    compile_bytecode()
    if args.baseline:
        compile_bytecode(args.baseline.resolve())
    plane = local_cluster.up(DIRECTORY)
    try:
        racks = max(args.nodes // 50, 1)
        plan = layout(racks=racks, nodes_per_rack=args.nodes // racks, prefix="n-")
        manifests = [node_manifest(n, cpu="64", memory="256Gi", gpu=8) for n in plan.nodes]
        create_nodes(api_client(plane.kubeconfig), manifests, workers=16)
        wait_ready(api_client(plane.kubeconfig), len(manifests))
        api = ApiClient(load_credentials(str(plane.kubeconfig)), connections=48)
        log = DIRECTORY / "logs" / "scheduler.log"
        try:
            rate = await ceiling(api, [n.name for n in plan.nodes], pods=args.pods)
            results = {"nodes": len(manifests), "pods": args.pods, "ceiling": round(rate, 1)}
            # With --baseline, each round runs that checkout's scheduler, then this one's.
            checkouts = {"baseline": args.baseline, "": None} if args.baseline else {"": None}
            for round_ in range(args.rounds):
                for label, checkout in checkouts.items():
                    b = await backlog(
                        api,
                        plane.kubeconfig,
                        log,
                        pods=args.pods,
                        name=f"backlog-{label or 'this'}-{round_}",
                        checkout=checkout,
                    )
                    b["ratio_first_to_last"] = round(
                        b.pop("pods_per_second_first_to_last") / rate, 2
                    )
                    b["ratio_from_start"] = round(b.pop("pods_per_second_from_start") / rate, 2)
                    results[f"backlog_{label}_{round_}" if label else f"backlog_{round_}"] = b
                    print(json.dumps(b), file=sys.stderr)
            if args.latency_pods:
                results["latency"] = await latency(
                    api, plane.kubeconfig, log, pods=args.latency_pods, rate=args.latency_rate
                )
        finally:
            await api.close()
        return results
    finally:
        local_cluster.down(DIRECTORY)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.podgroups", description=__doc__)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=2, help="backlog runs")
    parser.add_argument("--latency-pods", type=int, default=400)
    parser.add_argument("--latency-rate", type=float, default=100)
    parser.add_argument("--profile", type=Path, help="py-spy each scheduler run into DIR")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="an A/B run: also run the scheduler of this checkout (with its own .venv) "
        "before ours in every backlog round",
    )
    args = parser.parse_args(argv)
    if args.profile:
        if not (Path(sys.executable).parent / "py-spy").exists():
            parser.error("--profile needs py-spy: .venv/bin/pip install py-spy")
        args.profile.mkdir(parents=True, exist_ok=True)
        PROFILE.append(args.profile.resolve())
    print(json.dumps(asyncio.run(main_async(args)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
