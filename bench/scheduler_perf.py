"""``make bench-scheduler-perf``: Kubernetes' own gang workloads, replayed for us and for
kube-scheduler's gang scheduling on the local control plane.

The workloads are those of ``test/integration/scheduler_perf`` at v1.37.2
(``podgroup/gangscheduling/performance-config.yaml``), run as scheduler_perf runs them: N
nodes of 4 cpu, 32Gi and 110 pods (its ``makeBaseNode``), the scheduler already running;
the PodGroups first (``scheduling.k8s.io``, ``gang.minCount`` the pods per group), then the
pods (100m cpu, 100Mi), pod *i* in group ⌊i / pods per group⌋. Both schedulers read the
same objects; only ``schedulerName`` differs.

Measured, per workload and scheduler: pods/s from the first pod created to the last bound
(scheduler_perf's SchedulingThroughput counts pods scheduled a second over that window), the
first and last bind after the first pod was created, p50 and p99 from a pod's creation to its
bind, and the scheduler's CPU seconds and peak RSS. Every gang is checked whole and every node
within its allocatable, as in ``make bench``.

It needs a control plane whose API server serves ``scheduling.k8s.io/v1beta1`` PodGroups and
a kube-scheduler of the same release: the default control plane (1.37), or KUBE_BIN_DIR at
another build of 1.37 or later. Results go to
``bench/results/scheduler-perf.{json,md}``; compare ratios within one run, never absolute
times across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench import audit
from bench.invariants import allocatable_of
from bench.metering import Meter, Quiet, log_size, longest_loop_lag_ms, usage
from bench.report import log, table, write
from bench.run import (
    Gangs,
    Setting,
    _all_bound,
    _gangs_settled,
    _invariants,
    _scheduler_log,
    _to_quiescence,
    _verdict,
    _wind_up,
    fresh,
    submit,
)
from bench.schedulers import ClientLimits, Contender, contenders
from bench.watching import BindWatch
from scheduler.shell.api import ApiClient, load_credentials
from testbed import cluster as local_cluster
from testbed.nodes import FakeNode, api_client, create_nodes, node_manifest, wait_ready

REPO = Path(__file__).resolve().parent.parent
DIRECTORY = REPO / ".cluster-scheduler-perf"
# scheduler_perf's pod template (templates/gang-pod.yaml): a pause container's requests.
POD_REQUESTS = {"cpu": "100m", "memory": "100Mi"}


@dataclass(frozen=True)
class Workload:
    """One of scheduler_perf's gang workloads: ``groups`` PodGroups of ``per_group`` pods
    on ``nodes`` nodes."""

    name: str
    nodes: int
    groups: int
    per_group: int

    @property
    def pods(self) -> int:
        return self.groups * self.per_group


# podgroup/gangscheduling/performance-config.yaml at v1.37.2, test case GangScheduling.
WORKLOADS = {
    w.name: w
    for w in (
        Workload("10Nodes_3Gangs", 10, 3, 3),
        Workload("100Nodes_10Gangs", 100, 10, 3),
        Workload("5000Nodes_1000Gangs_3000Pods", 5000, 1000, 3),
        Workload("5000Nodes_2000Gangs_6000Pods", 5000, 2000, 3),
        Workload("5000Nodes_3000Gangs_9000Pods", 5000, 3000, 3),
        Workload("5000Nodes_3Gangs_3000Pods_1000PerGroup", 5000, 3, 1000),
        Workload("5000Nodes_6Gangs_6000Pods_1000PerGroup", 5000, 6, 1000),
        Workload("5000Nodes_9Gangs_9000Pods_1000PerGroup", 5000, 9, 1000),
    )
}
SCHEDULERS = ("gang_scheduler", "kube_scheduler")


def base_node(index: int) -> dict:
    """scheduler_perf's makeBaseNode: 4 cpu, 32Gi, 110 pods."""
    return node_manifest(
        FakeNode(name=f"perf-node-{index}", labels={}), cpu="4", memory="32Gi", pods=110
    )


def on_upstream_podgroups(contender: Contender, version: str) -> Contender:
    """The contender writing its gangs as scheduling.k8s.io PodGroups of ``version`` (we read
    them as kube-scheduler does)."""
    return dataclasses.replace(
        contender,
        gang_api="upstream",
        upstream_api=version,
        settings={**contender.settings, "gangs": f"{version} PodGroup (gang policy, minCount)"},
    )


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(int(len(ordered) * share + 0.5) - 1, 0)]


async def replay(setting: Setting, contender: Contender, workload: Workload) -> dict:
    """One workload for one scheduler, started and given time to list the cluster before
    the first PodGroup is created (as scheduler_perf's scheduler runs throughout)."""
    gangs = Gangs(sizes=(workload.per_group,) * workload.groups)
    namespace = await fresh(setting, f"perf-{contender.key}")
    log_path = _scheduler_log(setting, contender)
    offset = log_size(log_path)
    scheduler = contender.start(log_path)
    meter = Meter(scheduler, setting.audit_log, contender.metrics_port).start()
    invariants = _invariants(setting, gangs)
    watch = BindWatch(setting.api, namespace, invariants=invariants).start()
    quiet: Quiet | None = None
    used: dict = {}
    try:
        await asyncio.sleep(5)
        first_created = time.monotonic()
        created = await submit(
            setting.api,
            contender,
            namespace=namespace,
            gangs=gangs,
            requests=POD_REQUESTS,
            concurrency=setting.concurrency,
        )
        await _all_bound(
            watch, invariants=invariants, contender=contender, started=first_created,
            scheduler=scheduler, pods=gangs.pods, timeout=setting.timeout,
        )  # fmt: skip
        usage(scheduler)  # still running
        quiet, used = await _to_quiescence(
            setting, meter, watched_last_bind=max(watch.bound_at.values())
        )
        checked_at = await _gangs_settled(watch, invariants)
    finally:
        counted = await _wind_up(
            setting, scheduler=scheduler, meter=meter, watch=watch, namespace=namespace,
            quiet=quiet,
        )  # fmt: skip
    used |= counted | longest_loop_lag_ms(log_path, offset)
    binds = list(watch.bound_at.values())
    waits = [watch.bound_at[p] - created[p] for p in watch.bound_at]
    span = max(binds) - first_created
    figures = {
        "pods": gangs.pods,
        "gangs": workload.groups,
        "pods_per_second": round(gangs.pods / span, 1),
        "first_bind_seconds": round(min(binds) - first_created, 2),
        "last_bind_seconds": round(span, 2),
        "creation_seconds": round(max(created.values()) - first_created, 2),
        "bind_p50_ms": round(statistics.median(waits) * 1000, 1),
        "bind_p99_ms": round(percentile(waits, 0.99) * 1000, 1),
        **used,
    }
    _verdict(contender, invariants, figures, at=checked_at)
    return figures


async def main_async(args: argparse.Namespace) -> dict:
    nodes = max(WORKLOADS[name].nodes for name in args.workloads)
    plane = local_cluster.up(
        DIRECTORY, audit_policy=audit.POLICY, controller_client=(args.qps, args.burst)
    )
    try:
        limits = ClientLimits(qps=args.qps, burst=args.burst, bind_concurrency=args.concurrency)
        peers = contenders(
            kubeconfig=plane.kubeconfig,
            workdir=DIRECTORY / "schedulers",
            limits=limits,
            only=frozenset(args.only),
        )
        upstream = next((p.upstream_api for p in peers if p.gang_api == "upstream"), "")
        if not upstream.endswith("v1beta1"):
            raise local_cluster.ClusterError(
                "scheduler_perf's workloads are 1.37's (v1beta1 PodGroups): point KUBE_BIN_DIR "
                "at a 1.37 build (bash e2e/controlplane/build.sh --release 1.37), or leave it "
                "unset for the default release"
            )
        peers = [on_upstream_podgroups(p, upstream) for p in peers]
        # Every workload runs on the first N of the nodes: the rest stay cordoned.
        manifests = [base_node(i) for i in range(nodes)]
        create_nodes(api_client(plane.kubeconfig), manifests, workers=16)
        wait_ready(api_client(plane.kubeconfig), nodes, timeout=max(300.0, nodes / 10))
        api = ApiClient(
            load_credentials(str(plane.kubeconfig)),
            connections=args.concurrency + 8,
            user_agent=audit.BENCH_USER_AGENT,
        )
        try:
            served = await api.request("GET", "/version")
            results: dict = {
                "settings": {
                    "machine": f"{os.cpu_count()} cores",
                    "control_plane": served.get("gitVersion", "?"),
                    "nodes": nodes,
                    "client": {"qps": args.qps, "burst": args.burst},
                    "pods": POD_REQUESTS,
                },
                "schedulers": {p.key: p.describe() for p in peers},
                "workloads": {},
            }
            for name in args.workloads:
                workload = WORKLOADS[name]
                if workload.nodes != nodes:
                    raise local_cluster.ClusterError(
                        f"{name} needs {workload.nodes} nodes; this run has {nodes}: run the "
                        "workloads of one node count together"
                    )
                setting = Setting(
                    api=api,
                    nodes=tuple(m["metadata"]["name"] for m in manifests),
                    logs=plane.logs,
                    concurrency=args.concurrency,
                    timeout=args.timeout,
                    allocatable={m["metadata"]["name"]: allocatable_of(m) for m in manifests},
                    audit_log=plane.logs / "audit.log",
                )
                rounds: dict[str, list[dict]] = {p.key: [] for p in peers}
                for number in range(args.rounds):
                    turn = number % len(peers)
                    for contender in peers[turn:] + peers[:turn]:
                        log(f"{name}, round {number + 1}: {contender.label}")
                        rounds[contender.key].append(await replay(setting, contender, workload))
                results["workloads"][name] = rounds
                write_results(results, args.out)
            return results
        finally:
            await api.close()
    finally:
        local_cluster.down(DIRECTORY)


FIGURES = (
    ("pods_per_second", "pods/s"),
    ("first_bind_seconds", "first bind (s)"),
    ("last_bind_seconds", "last bind (s)"),
    ("bind_p50_ms", "p50 create->bind (ms)"),
    ("bind_p99_ms", "p99 create->bind (ms)"),
    ("cpu_seconds", "CPU (s)"),
)


def _median(runs: list[dict], key: str) -> str:
    values = [r[key] for r in runs if key in r]
    if not values:
        return "-"
    middle = statistics.median(values)
    return f"{middle:g} ({min(values):g}-{max(values):g})" if len(values) > 1 else f"{middle:g}"


def markdown(results: dict) -> str:
    settings = results["settings"]
    lines = [
        "# scheduler_perf's gang workloads (Kubernetes v1.37.2), replayed",
        "",
        f"Control plane {settings['control_plane']}, {settings['nodes']} nodes of 4 cpu, 32Gi, "
        f"110 pods; pods of {settings['pods']['cpu']} cpu and {settings['pods']['memory']}; "
        f"{settings['machine']}. Medians of the rounds (min-max).",
        "",
    ]
    for name, rounds in results["workloads"].items():
        lines += [f"## GangScheduling/{name}", ""]
        rows = [
            [results["schedulers"][key]["label"], *(_median(runs, k) for k, _ in FIGURES)]
            for key, runs in rounds.items()
        ]
        lines += [*table(["scheduler", *(label for _, label in FIGURES)], rows), ""]
    return "\n".join(lines)


def write_results(results: dict, out: Path) -> None:
    write("scheduler-perf", results, markdown(results), into=out)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scheduler_perf", description=__doc__)
    parser.add_argument(
        "--workloads", nargs="+", choices=sorted(WORKLOADS), default=["100Nodes_10Gangs"]
    )
    parser.add_argument("--only", nargs="+", choices=SCHEDULERS, default=list(SCHEDULERS))
    parser.add_argument("--rounds", type=int, default=3)
    # As make bench: every scheduler's client at scheduler_perf's own QPS and burst.
    parser.add_argument("--qps", type=float, default=5000.0)
    parser.add_argument("--burst", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
