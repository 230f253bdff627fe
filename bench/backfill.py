"""``make bench``: gang preemption and starvation-free backfill (#12), on the local control plane.

Two scenarios, each on nodes of its own, with gang-scheduler as a process:

1. **Preemption latency.** Low-priority gangs fill every node; a high-priority gang that
   needs the room of some of them is created. Measured: from its last pod created to its
   last pod bound (the victims' eviction, their leaving, the nomination and the bind), per
   round, and how many pods were evicted for it.
2. **Starvation.** A stream of 2-pod gangs (1 cpu each, done after a few seconds: KWOK's
   ``pod-complete.stage.kwok.x-k8s.io/delay`` through ``e2e/kwok-complete-after.yaml``)
   keeps the nodes nearly full; a big gang that needs every node is created into it.
   Measured: the big gang's wait (created to whole), the cluster's cpu utilisation before
   and during the wait (sampled), and how many small gangs bound meanwhile; once with
   ``--starvation-after`` and once without it (the big gang then waits out the window).

Figures go to ``bench/results/backfill.{json,md}``. The e2e test ``e2e/test_backfill.py``
runs the starvation scenario at a small size and checks its bounds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from bench.report import table, write
from bench.schedulers import stop
from scheduler.model import names
from scheduler.shell.api import ApiClient, ApiError, load_credentials
from testbed import cluster as local_cluster
from testbed.nodes import api_client, create_nodes, layout, node_manifest, wait_ready

REPO = Path(__file__).resolve().parent.parent
BENCH_DIR = REPO / ".cluster-backfill"
COMPLETE_AFTER = "pod-complete.stage.kwok.x-k8s.io/delay"
FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Placement:
    """Where the scenario's pods go and who schedules them: a node selector that keeps them
    on the scenario's nodes (a shared control plane has others) and a scheduler name."""

    scheduler: str
    node_selector: dict[str, str]


def gang_pod(
    name: str,
    *,
    gang: str,
    size: int,
    cpu: str,
    where: Placement,
    priority_class: str = "",
    lifetime: float | None = None,
) -> dict:
    annotations = {names.KOORD_NAME: gang, names.KOORD_MIN_AVAILABLE: str(size)}
    if lifetime is not None:
        annotations[COMPLETE_AFTER] = f"{lifetime:g}s"
    spec: dict = {
        "schedulerName": where.scheduler,
        "nodeSelector": dict(where.node_selector),
        "containers": [
            {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
        ],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": spec,
    }


def _cpu(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


async def _pods(api: ApiClient, namespace: str) -> list[dict]:
    return (await api.request("GET", f"/api/v1/namespaces/{namespace}/pods"))["items"]


def _busy_cpu(pods: list[dict]) -> float:
    """The cpu requested by the pods that hold room on a node (bound, not finished)."""
    return sum(
        _cpu(c["resources"]["requests"]["cpu"])
        for p in pods
        if p["spec"].get("nodeName") and p.get("status", {}).get("phase") not in FINISHED
        for c in p["spec"]["containers"]
    )


async def _create(api: ApiClient, namespace: str, manifests: list[dict]) -> float:
    """Create the pods concurrently; the time the last creation was acknowledged."""
    await asyncio.gather(
        *(api.post(f"/api/v1/namespaces/{namespace}/pods", m, retries=3) for m in manifests)
    )
    return time.monotonic()


async def _clear(api: ApiClient, namespace: str, *, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    with contextlib.suppress(ApiError):
        await api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods")
    while await _pods(api, namespace):
        if time.monotonic() > deadline:
            raise TimeoutError(f"pods in {namespace} not gone after {timeout:g}s")
        await asyncio.sleep(0.25)


async def _wait_bound(
    api: ApiClient, namespace: str, prefix: str, count: int, *, timeout: float
) -> float:
    """Until ``count`` pods named PREFIX-* are bound; the time it was seen (polled at 0.1 s)."""
    deadline = time.monotonic() + timeout
    while True:
        pods = await _pods(api, namespace)
        bound = sum(
            1
            for p in pods
            if p["metadata"]["name"].startswith(prefix + "-") and p["spec"].get("nodeName")
        )
        if bound >= count:
            return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{bound} of {count} pods of {prefix} bound after {timeout:g}s")
        await asyncio.sleep(0.1)


async def priority_classes(api: ApiClient, prefix: str) -> tuple[str, str]:
    """A low (1) and a high (1000) PriorityClass named after ``prefix``."""
    low, high = f"{prefix}-low", f"{prefix}-high"
    for name, value in ((low, 1), (high, 1000)):
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value}  # fmt: skip
        try:
            await api.post("/apis/scheduling.k8s.io/v1/priorityclasses", body)
        except ApiError as error:
            if error.status != 409:
                raise
    return low, high


async def preemption(
    api: ApiClient,
    *,
    namespace: str,
    where: Placement,
    nodes: int,
    node_cpu: int,
    rounds: int,
    timeout: float = 120,
) -> dict:
    """Each round: ``nodes`` low gangs of 2 fill every node (half a node each), then a high
    gang of 2 that needs one node whole. Its latency is from its last pod created to its
    last pod bound."""
    low, high = await priority_classes(api, namespace)
    half = str(node_cpu // 2)
    latencies: list[float] = []
    evicted: list[int] = []
    for r in range(rounds):
        fillers = [
            gang_pod(
                f"low{g}-{i}", gang=f"low{g}", size=2, cpu=half, where=where, priority_class=low
            )
            for g in range(nodes)
            for i in range(2)
        ]
        await _create(api, namespace, fillers)
        for g in range(nodes):
            await _wait_bound(api, namespace, f"low{g}", 2, timeout=timeout)
        urgent = [
            gang_pod(f"high-{i}", gang="high", size=2, cpu=half, where=where, priority_class=high)
            for i in range(2)
        ]
        created = await _create(api, namespace, urgent)
        bound = await _wait_bound(api, namespace, "high", 2, timeout=timeout)
        latencies.append(bound - created)
        left = {p["metadata"]["name"] for p in await _pods(api, namespace)}
        evicted.append(sum(1 for p in fillers if p["metadata"]["name"] not in left))
        await _clear(api, namespace)
        print(f"preemption round {r}: {latencies[-1]:.2f}s, {evicted[-1]} evicted", flush=True)
    return {
        "rounds": rounds,
        "nodes": nodes,
        "latency_seconds": [round(x, 3) for x in latencies],
        "latency_p50_seconds": round(statistics.median(latencies), 3),
        "latency_max_seconds": round(max(latencies), 3),
        "evicted_per_round": evicted,
    }


async def starvation(
    api: ApiClient,
    *,
    namespace: str,
    where: Placement,
    capacity_cpu: float,
    big_size: int,
    lifetime: float,
    warmup: float,
    window: float,
    starvation_after: float | None,
) -> dict:
    """A stream of 2-pod gangs (1 cpu each, done after ``lifetime``) at a rate that would
    keep 1.25 times the capacity busy; after ``warmup`` a big gang of ``big_size`` members
    that needs every cpu of the nodes. Sampled every 0.25 s until it is whole or
    ``window`` passed: cpu in use over capacity, and the small gangs bound meanwhile."""
    rate = 1.25 * capacity_cpu / (2 * lifetime)  # small gangs a second
    big_cpu = capacity_cpu / big_size
    start = time.monotonic()
    stop = asyncio.Event()
    created_small = 0

    async def stream() -> None:
        nonlocal created_small
        while not stop.is_set():
            due = start + created_small / rate
            await asyncio.sleep(max(due - time.monotonic(), 0))
            gang = f"s{created_small}"
            created_small += 1
            members = [
                gang_pod(f"{gang}-{i}", gang=gang, size=2, cpu="1", where=where, lifetime=lifetime)
                for i in range(2)
            ]
            await _create(api, namespace, members)

    streaming = asyncio.get_running_loop().create_task(stream())
    try:
        await asyncio.sleep(warmup)
        big = [
            gang_pod(
                f"big-{i}",
                gang="big",
                size=big_size,
                cpu=f"{int(big_cpu * 1000)}m",
                where=where,
                lifetime=lifetime,
            )
            for i in range(big_size)
        ]
        created = await _create(api, namespace, big)
        samples, bound_at = await _sample(
            api, namespace, since=created, big_size=big_size, capacity_cpu=capacity_cpu,
            window=window,
        )  # fmt: skip
    finally:
        stop.set()
        streaming.cancel()
        with contextlib.suppress(asyncio.CancelledError, ApiError):
            await streaming
    # The stream has stopped: once the binds have stopped, no small gang may be left with
    # one pod bound and the other not (a Strict gang is bound whole or not at all).
    gangs = await _settled_small_gangs(api, namespace)
    small_bound = sum(1 for v in gangs.values() if all(v))
    half_bound = sorted(g for g, v in gangs.items() if any(v) and not all(v))
    waited = (bound_at - created) if bound_at is not None else None
    head_from = starvation_after if starvation_after is not None else math.inf
    before = [u for t, u in samples if t < head_from]
    during = [u for t, u in samples if t >= head_from]
    result = {
        "starvation_after_seconds": starvation_after,
        "capacity_cpu": capacity_cpu,
        "big_gang": {"members": big_size, "cpu_each": round(big_cpu, 3)},
        "small_gangs_per_second": round(rate, 2),
        "small_gang_lifetime_seconds": lifetime,
        "big_gang_wait_seconds": round(waited, 2) if waited is not None else None,
        "big_gang_bound": waited is not None,
        "window_seconds": window,
        "utilisation_before_head": round(statistics.fmean(before), 3) if before else None,
        "utilisation_while_head_waits": round(statistics.fmean(during), 3) if during else None,
        "utilisation_over_wait": round(statistics.fmean(u for _, u in samples), 3)
        if samples
        else None,
        "small_gangs_created": created_small,
        "small_gangs_bound_in_all": small_bound,
        "small_gangs_half_bound": half_bound,
    }
    print(f"starvation (after={starvation_after}): {json.dumps(result)}", flush=True)
    return result


async def _sample(
    api: ApiClient, namespace: str, *, since: float, big_size: int, capacity_cpu: float,
    window: float,
) -> tuple[list[tuple[float, float]], float | None]:  # fmt: skip
    """Every 0.25 s until the big gang is whole or ``window`` passed: (seconds since it was
    created, cpu in use over capacity); and when it was seen whole, if it was."""
    samples: list[tuple[float, float]] = []
    while time.monotonic() - since < window:
        pods = await _pods(api, namespace)
        now = time.monotonic()
        samples.append((now - since, _busy_cpu(pods) / capacity_cpu))
        big = [p for p in pods if p["metadata"]["name"].startswith("big-")]
        if sum(1 for p in big if p["spec"].get("nodeName")) == big_size:
            return samples, now
        await asyncio.sleep(0.25)
    return samples, None


async def _settled_small_gangs(
    api: ApiClient, namespace: str, *, quiet: float = 1.5, limit: float = 20.0
) -> dict[str, list[bool]]:
    """The small gangs once no pod has been bound for ``quiet`` seconds (at most ``limit``).
    Gangs held back by the big gang's hold bind when its pods finish, one lifetime after
    it bound: a single look a fixed time after the stream stopped could fall between the
    first and the second bind of such a gang (a commit point binds one member, then the
    rest) and call it half bound; it did once in make test, with both members bound 11 ms
    apart. A gang that is really left half bound stays so, and is still seen."""
    deadline = time.monotonic() + limit
    gangs = _small_gangs(await _pods(api, namespace))
    still_since = time.monotonic()
    while time.monotonic() - still_since < quiet and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        now = _small_gangs(await _pods(api, namespace))
        if now != gangs:
            gangs, still_since = now, time.monotonic()
    return gangs


def _small_gangs(pods: list[dict]) -> dict[str, list[bool]]:
    gangs: dict[str, list[bool]] = {}
    for p in pods:
        name = p["metadata"]["name"]
        if name.startswith("s"):
            gangs.setdefault(name.rsplit("-", 1)[0], []).append(bool(p["spec"].get("nodeName")))
    return gangs


def start_scheduler(kubeconfig: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "scheduler", "run", "--kubeconfig", str(kubeconfig),
             "--max-backoff", "2", *extra],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip


def markdown(results: dict) -> str:
    p = results["preemption"]
    lines = [
        "# Gang preemption and starvation-free backfill (`python -m bench.backfill`)",
        "",
        f"{results['machine']}; gang-scheduler as a process on the local control plane.",
        "",
        "## Preemption latency",
        "",
        f"{p['nodes']} nodes, filled by low-priority gangs of 2 (each member half a node); a "
        "high-priority gang of 2 alike needs the room of one of them. Latency: its last pod "
        "created to its last pod bound (eviction, the victims leaving, the bind).",
        "",
        *table(
            ["rounds", "p50", "max", "pods evicted per round"],
            [
                [
                    p["rounds"],
                    f"{p['latency_p50_seconds']} s",
                    f"{p['latency_max_seconds']} s",
                    ", ".join(map(str, p["evicted_per_round"])),
                ]
            ],
        ),
        "",
        "## Starvation: a big gang in a stream of small ones",
        "",
    ]
    rows = []
    for s in results["starvation"]:
        wait = (
            f"{s['big_gang_wait_seconds']} s"
            if s["big_gang_bound"]
            else f"not whole after {s['window_seconds']:g} s"
        )
        after = f"{s['starvation_after_seconds']:g} s" if s["starvation_after_seconds"] else "off"
        rows.append(
            [
                after,
                wait,
                s["utilisation_before_head"],
                s["utilisation_while_head_waits"] or "-",
                s["utilisation_over_wait"],
                s["small_gangs_created"],
                s["small_gangs_bound_in_all"],
                len(s["small_gangs_half_bound"]),
            ]
        )
    header = ["--starvation-after", "big gang wait", "utilisation before the head"]
    header += ["while it waits", "over the wait", "small gangs created", "bound", "half bound"]
    lines += table(header, rows)
    s = results["starvation"][0]
    lines += [
        "",
        f"{s['capacity_cpu']:g} cpu in all; small gangs of 2 x 1 cpu at "
        f"{s['small_gangs_per_second']}/s, each done {s['small_gang_lifetime_seconds']:g} s "
        f"after it runs; the big gang {s['big_gang']['members']} x {s['big_gang']['cpu_each']} cpu "
        "(every cpu). With the head, the room it needs is held as it frees (backfill goes on "
        "elsewhere until then): its wait is about --starvation-after plus one small gang's "
        "lifetime. Without it, small gangs take every room that frees.",
        "",
    ]
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> dict:
    plane = local_cluster.up(BENCH_DIR)
    try:
        credentials = load_credentials(str(plane.kubeconfig))
        api = ApiClient(credentials, connections=32)
        log = BENCH_DIR / "logs" / "scheduler.log"
        try:
            results: dict = {"machine": f"{os.cpu_count()} cores"}
            # Preemption: nodes labelled for it.
            plan = layout(racks=1, nodes_per_rack=args.preemption_nodes, prefix="preempt-")
            create_nodes(api_client(plane.kubeconfig), [
                node_manifest(n, cpu=str(args.node_cpu), memory="256Gi") for n in plan.nodes
            ])  # fmt: skip
            wait_ready(api_client(plane.kubeconfig), len(plan.nodes))
            where = Placement("gang-scheduler", {"bench": "preempt"})
            await _label(api, [n.name for n in plan.nodes], {"bench": "preempt"})
            await api.post("/api/v1/namespaces", {"metadata": {"name": "bench-preempt"}})
            scheduler = start_scheduler(plane.kubeconfig, log)
            try:
                results["preemption"] = await preemption(
                    api, namespace="bench-preempt", where=where, nodes=args.preemption_nodes,
                    node_cpu=args.node_cpu, rounds=args.rounds,
                )  # fmt: skip
            finally:
                stop(scheduler)
            # Starvation: nodes of their own.
            starve = layout(racks=1, nodes_per_rack=args.starvation_nodes, prefix="starve-")
            create_nodes(api_client(plane.kubeconfig), [
                node_manifest(n, cpu="8", memory="256Gi") for n in starve.nodes
            ])  # fmt: skip
            wait_ready(api_client(plane.kubeconfig), len(plan.nodes) + len(starve.nodes))
            await _label(api, [n.name for n in starve.nodes], {"bench": "starve"})
            results["starvation"] = []
            for after in (args.starvation_after, None):
                namespace = f"bench-starve-{'on' if after else 'off'}"
                await api.post("/api/v1/namespaces", {"metadata": {"name": namespace}})
                flags = ["--starvation-after", str(after if after else 10**6)]
                scheduler = start_scheduler(plane.kubeconfig, log, *flags)
                try:
                    results["starvation"].append(
                        await starvation(
                            api, namespace=namespace,
                            where=Placement("gang-scheduler", {"bench": "starve"}),
                            capacity_cpu=8.0 * args.starvation_nodes, big_size=args.big_size,
                            lifetime=args.lifetime, warmup=args.lifetime,
                            window=args.window, starvation_after=after,
                        )
                    )  # fmt: skip
                finally:
                    stop(scheduler)
                    await _clear(api, namespace)
        finally:
            await api.close()
        return results
    finally:
        local_cluster.down(BENCH_DIR)


async def _label(api: ApiClient, nodes: list[str], labels: dict[str, str]) -> None:
    for node in nodes:
        await api.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": labels}})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.backfill", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--preemption-nodes", type=int, default=8)
    parser.add_argument("--node-cpu", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--starvation-nodes", type=int, default=4)
    parser.add_argument("--big-size", type=int, default=32)
    parser.add_argument("--lifetime", type=float, default=4.0, help="seconds a small gang runs")
    parser.add_argument("--starvation-after", type=float, default=10.0)
    parser.add_argument("--window", type=float, default=45.0, help="longest wait measured")
    args = parser.parse_args(argv)
    try:
        results = asyncio.run(main_async(args))
    except (local_cluster.ClusterError, ApiError, TimeoutError) as error:
        traceback.print_exc()
        print(f"bench failed: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    write("backfill", results, markdown(results), quiet=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
