"""A soak: hours of steady churn on the local control plane, gang-scheduler as a process,
its footprint sampled over time and the bench's invariants checked throughout.

The churn, from one seed:

* gangs arrive at a steady rate (Koordinator annotations: sizes 1 to 32, 1 to 8 cpu a
  member), each running for a while once bound (KWOK completes its pods after a delay, the
  annotation ``pod-complete.stage.kwok.x-k8s.io/delay``); sized to keep the cluster about
  ``--load`` full, so gangs queue. An arrival is held back while ``--backlog`` gangs wait
  already, as an admission queue in front of a real cluster (Kueue) would: the backlog stays
  level, so what the scheduler holds in memory and does in a pass stays the same from the
  first hour to the last, and a growth in either is the scheduler's, not the workload's;
* a share of them at a higher priority; and every ``--preempt-every`` seconds a *preemptor*,
  a gang at the higher priority of ``nodes / 20`` members (at most 16) asking 4 cpu each:
  with the cluster full it fits only by preempting whole gangs of the lower priority (small
  gangs at the higher priority find room as it frees, ahead of the backlog, and rarely need
  to);
* now and then a node goes (its pods with it, as the pod garbage collector would) and a new
  one comes;
* a janitor deletes what finished, what timed out and gangs waiting past ``--give-up``, so the
  API server holds a steady amount.

Every ``--sample`` seconds: the scheduler's RSS, its CPU, the event loop's longest stretch
since the last sample (from the lag histogram's buckets), the passes' count and mean and
p99 duration since the last sample, pending gangs, binds, evictions. The invariants
(``bench/invariants.py``: no gang partly bound past its bound, no node given more than it
has) are fed by a watch of the namespace's pods. Figures go to
``bench/results/NAME.{json,md}``; the run fails if an invariant broke or the scheduler died.

    python -m bench.soak                              # 1,000 nodes, two hours
    python -m bench.soak --nodes 50 --minutes 2 --name soak-short
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench.invariants import Invariants, allocatable_of
from bench.metering import cpu_seconds
from bench.report import log, table, write
from bench.schedulers import stop
from bench.watching import BindWatch
from scheduler.model import names
from scheduler.shell.api import ApiClient, ApiError, load_credentials
from testbed import cluster as local_cluster
from testbed.nodes import FakeNode, api_client, create_nodes, node_manifest, wait_ready

REPO = Path(__file__).resolve().parent.parent
SOAK_DIR = REPO / ".cluster-soak"
NAMESPACE = "soak"
COMPLETE_AFTER = "pod-complete.stage.kwok.x-k8s.io/delay"
SIZES = (1, 2, 2, 4, 4, 8, 8, 8, 16, 32)
CPUS = (1, 1, 2, 2, 4, 8)
NODE_CPU = 32
# A preemptor's pod asks a whole node: a churning cluster nearly always has a few cpu free
# somewhere, so smaller preemptors found room without preempting (16 x 4 cpu at 1,000
# nodes, 2 x 4 cpu at 16 nodes evicted nothing).
PREEMPTOR_CPU = NODE_CPU
PRIORITIES = {"soak-low": 100, "soak-high": 1000}


@dataclass(frozen=True)
class Churn:
    """What the soak does, and for how long."""

    nodes: int
    minutes: float
    seed: int = 1
    # The cpu the arrivals ask for, as a share of the cluster's: above 1, so that the cluster
    # stays full, the backlog stays at its cap and preemptors must preempt (at 0.9 a
    # 1,000-node cluster ran 72% full, nothing waited and nothing was preempted).
    load: float = 1.2
    lifetime: float = 300.0  # mean seconds a gang runs once bound
    high_share: float = 0.25  # gangs at the higher priority
    node_every: float = 60.0  # seconds between a node going and a new one coming
    give_up: float = 900.0  # a gang still waiting this long is deleted
    sample: float = 30.0
    timeout: float = 600.0  # --default-timeout of the scheduler
    backlog: int = 0  # arrivals held back while this many gangs wait; 0: nodes / 20
    preempt_every: float = 120.0  # seconds between preemptors
    preemptor_cpu: int = PREEMPTOR_CPU  # cpu of each of a preemptor's pods

    @property
    def most_waiting(self) -> int:
        return self.backlog or max(self.nodes // 20, 4)

    @property
    def preemptor_size(self) -> int:
        return min(max(self.nodes // 20, 2), 16)

    @property
    def gangs_per_second(self) -> float:
        """Arrivals that keep ``load`` of the cpu busy: capacity / (mean cpu a gang x its
        mean lifetime)."""
        mean_cpu = statistics.mean(SIZES) * statistics.mean(CPUS)
        return self.load * self.nodes * NODE_CPU / (mean_cpu * self.lifetime)


@dataclass
class Tally:
    gangs_created: int = 0
    pods_created: int = 0
    nodes_replaced: int = 0
    deleted_finished: int = 0
    deleted_timed_out: int = 0
    deleted_given_up: int = 0
    create_errors: int = 0
    held_back: int = 0  # arrivals not made: the backlog was full
    preemptors: int = 0
    samples_missed: int = 0  # /metrics did not answer in time: the sample was skipped
    created_at: dict[str, float] = field(default_factory=dict)
    # Gangs created and not yet seen whole, nor deleted while they waited.
    waiting: set[str] = field(default_factory=set)

    def still_waiting(self, invariants: Invariants) -> int:
        self.waiting = {g for g in self.waiting if not invariants.whole(g)}
        return len(self.waiting)


def _pod(name: str, *, gang: str, size: int, cpu: int, lifetime: float, priority: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "annotations": {
                names.KOORD_NAME: gang,
                names.KOORD_MIN_AVAILABLE: str(size),
                COMPLETE_AFTER: f"{lifetime:.0f}s",
            },
        },
        "spec": {
            "schedulerName": "gang-scheduler",
            "priorityClassName": priority,
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": str(cpu)}}}
            ],
        },
    }


async def _create_gang(
    api: ApiClient,
    tally: Tally,
    invariants: Invariants,
    *,
    gang: str,
    size: int,
    cpu: int,
    lifetime: float,
    priority: str,
) -> None:
    members = [f"{gang}-{i}" for i in range(size)]
    invariants.add_gang(gang, members, minimum=size)
    tally.created_at[gang] = time.monotonic()
    tally.waiting.add(gang)
    results = await asyncio.gather(
        *(
            api.post(
                f"/api/v1/namespaces/{NAMESPACE}/pods",
                _pod(m, gang=gang, size=size, cpu=cpu, lifetime=lifetime, priority=priority),
                retries=3,
            )
            for m in members
        ),
        return_exceptions=True,
    )
    tally.create_errors += sum(1 for r in results if isinstance(r, BaseException))
    tally.gangs_created += 1
    tally.pods_created += size


async def arrive(
    api: ApiClient, churn: Churn, tally: Tally, invariants: Invariants, *, until: float
) -> None:
    """Gangs at a steady rate (exponential gaps from the seed) until ``until``; an arrival
    while ``churn.most_waiting`` gangs wait is held back (not made, counted)."""
    pick = random.Random(churn.seed)
    rate = churn.gangs_per_second
    number = 0
    while (now := time.monotonic()) < until:
        await asyncio.sleep(min(pick.expovariate(rate), max(until - now, 0)))
        number += 1
        # Drawn whether or not it is made, so that a seed's gangs are the same gangs.
        gang, size, cpu = f"g{number}", pick.choice(SIZES), pick.choice(CPUS)
        lifetime = max(pick.expovariate(1 / churn.lifetime), 5.0)
        priority = "soak-high" if pick.random() < churn.high_share else "soak-low"
        if tally.still_waiting(invariants) >= churn.most_waiting:
            tally.held_back += 1
            continue
        await _create_gang(
            api, tally, invariants,
            gang=gang, size=size, cpu=cpu, lifetime=lifetime, priority=priority,
        )  # fmt: skip


async def preemptors(
    api: ApiClient, churn: Churn, tally: Tally, invariants: Invariants, *, until: float
) -> None:
    """Every ``churn.preempt_every`` seconds a gang at the higher priority that asks more
    than a full cluster frees in a moment, so that it preempts; never held back."""
    pick = random.Random(churn.seed + 2)
    number = 0
    while time.monotonic() + churn.preempt_every < until:
        await asyncio.sleep(churn.preempt_every)
        number += 1
        await _create_gang(
            api, tally, invariants,
            gang=f"p{number}", size=churn.preemptor_size, cpu=churn.preemptor_cpu,
            lifetime=max(pick.expovariate(1 / churn.lifetime), 5.0), priority="soak-high",
        )  # fmt: skip
        tally.preemptors += 1


async def replace_nodes(
    api: ApiClient, churn: Churn, tally: Tally, invariants: Invariants, *, until: float
) -> None:
    """Every ``node_every`` seconds one node goes, its pods with it, and a new one comes."""
    pick = random.Random(churn.seed + 1)
    alive = [f"soak-{i}" for i in range(churn.nodes)]
    made = churn.nodes
    while time.monotonic() + churn.node_every < until:
        await asyncio.sleep(churn.node_every)
        gone = alive.pop(pick.randrange(len(alive)))
        with contextlib.suppress(ApiError):
            await api.request("DELETE", f"/api/v1/nodes/{gone}")
        on_it = await api.request(
            "GET", f"/api/v1/namespaces/{NAMESPACE}/pods?fieldSelector=spec.nodeName={gone}"
        )
        for pod in on_it.get("items", []):
            with contextlib.suppress(ApiError):
                await api.request(
                    "DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod['metadata']['name']}"
                )
        new = FakeNode(name=f"soak-{made}")
        made += 1
        manifest = node_manifest(new, cpu=str(NODE_CPU), memory="256Gi")
        await asyncio.to_thread(create_nodes, api_client(SOAK_DIR / "kubeconfig"), [manifest])
        invariants.allocatable[new.name] = allocatable_of(manifest)
        alive.append(new.name)
        tally.nodes_replaced += 1


async def janitor(api: ApiClient, churn: Churn, tally: Tally, *, until: float) -> None:
    """Every 10 s: delete finished pods, timed-out gangs and gangs waiting past give-up."""
    while time.monotonic() < until:
        await asyncio.sleep(10)
        try:
            pods = (await api.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods"))["items"]
        except ApiError:
            continue
        now = time.monotonic()
        doomed: list[tuple[str, str]] = []
        for pod in pods:
            meta, status = pod["metadata"], pod.get("status") or {}
            if meta.get("deletionTimestamp"):
                continue  # deleted already, and going
            gang = (meta.get("annotations") or {}).get(names.KOORD_NAME, "")
            if status.get("phase") in ("Succeeded", "Failed"):
                doomed.append((meta["name"], "finished"))
            elif (meta.get("annotations") or {}).get(names.KOORD_TIMEOUT) == "true":
                doomed.append((meta["name"], "timed_out"))
            elif not pod["spec"].get("nodeName") and now - tally.created_at.get(gang, now) > (
                churn.give_up
            ):
                doomed.append((meta["name"], "given_up"))
        for name, why in doomed:
            if why != "finished":
                tally.waiting.discard(name.rsplit("-", 1)[0])
            with contextlib.suppress(ApiError):
                await api.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
                setattr(tally, f"deleted_{why}", getattr(tally, f"deleted_{why}") + 1)


def _scrape(port: int) -> dict[str, dict[tuple, float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    found: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def _buckets(scraped: dict, name: str) -> dict[float, float]:
    return {
        float(dict(labels)["le"]): value
        for labels, value in scraped.get(f"{name}_bucket", {}).items()
    }


def _quantile(before: dict[float, float], after: dict[float, float], q: float) -> float | None:
    """The bucket bound below which ``q`` of the observations between two scrapes fell."""
    delta = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = delta[-1][1] if delta else 0.0
    if total <= 0:
        return None
    for le, count in delta:
        if count >= q * total:
            return le
    return delta[-1][0]


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _one(scraped: dict, name: str) -> float:
    return sum(scraped.get(name, {}).values())


async def sample(
    process: subprocess.Popen[bytes],
    port: int,
    churn: Churn,
    tally: Tally,
    watch: BindWatch,
    *,
    started: float,
    until: float,
) -> list[dict]:
    """A sample every ``churn.sample`` seconds until ``until``."""
    samples: list[dict] = []
    before = await asyncio.to_thread(_scrape, port)
    while time.monotonic() < until:
        await asyncio.sleep(churn.sample)
        if process.poll() is not None:
            raise RuntimeError(f"the scheduler exited with {process.returncode} during the soak")
        try:
            after = await asyncio.to_thread(_scrape, port)
        except OSError as error:  # TimeoutError, a refused or reset connection
            # A starved machine can leave /metrics unanswered for its 5 s: that sample is
            # missed (the next spans both windows), the soak goes on (a 2-hour run on a
            # busy machine died so at minute 63).
            log(f"sample skipped: /metrics did not answer ({type(error).__name__})")
            tally.samples_missed += 1
            continue
        passes = _one(after, "gang_scheduler_pass_duration_seconds_count") - _one(
            before, "gang_scheduler_pass_duration_seconds_count"
        )
        spent = _one(after, "gang_scheduler_pass_duration_seconds_sum") - _one(
            before, "gang_scheduler_pass_duration_seconds_sum"
        )
        lag = "gang_scheduler_event_loop_lag_seconds"
        samples.append(
            {
                "minute": round((time.monotonic() - started) / 60, 2),
                "rss_mib": round(_rss_mib(process.pid), 1),
                "cpu_seconds": round(cpu_seconds(process.pid), 1),
                # The longest stretch in the window, to its histogram bucket's bound.
                "loop_stretch_max_s": _quantile(_buckets(before, lag), _buckets(after, lag), 1.0),
                "passes": int(passes),
                "pass_mean_ms": round(1000 * spent / passes, 1) if passes else None,
                "pass_p99_s": _quantile(
                    _buckets(before, "gang_scheduler_pass_duration_seconds"),
                    _buckets(after, "gang_scheduler_pass_duration_seconds"),
                    0.99,
                ),
                "pending_gangs": _one(after, "gang_scheduler_pending_gangs"),
                "pods_bound": len(watch.bound_at),
                "evicted": int(
                    _one(after, "gang_scheduler_preemption_victims_total")
                    + _one(after, "gang_scheduler_stale_gang_victims_total")
                ),
                "gangs_created": tally.gangs_created,
                "held_back": tally.held_back,
                "broken": len(watch.invariants.broken) if watch.invariants else 0,
            }
        )
        before = after
    return samples


def start_scheduler(kubeconfig: Path, log: Path, port: int, churn: Churn) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "scheduler", "run", "--kubeconfig", str(kubeconfig),
             "--metrics-port", str(port), "--default-timeout", f"{churn.timeout:g}"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip


async def soak(api: ApiClient, kubeconfig: Path, churn: Churn, *, log: Path) -> dict:
    """The soak on the cluster ``api`` reaches, whose nodes ``soak-0 ...`` exist."""
    for name, value in PRIORITIES.items():
        with contextlib.suppress(ApiError):  # already there: a second soak on one cluster
            await api.post(
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                {"metadata": {"name": name}, "value": value},
            )
    with contextlib.suppress(ApiError):
        await api.post("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    nodes = (await api.request("GET", "/api/v1/nodes"))["items"]
    tally = Tally()
    invariants = Invariants(
        allocatable={n["metadata"]["name"]: allocatable_of(n) for n in nodes}, gangs={}, minimum={}
    )
    watch = await BindWatch(api, NAMESPACE, invariants=invariants).start().until_listed(timeout=120)
    port = local_cluster.free_port()
    process = start_scheduler(kubeconfig, log, port, churn)
    started = time.monotonic()
    until = started + churn.minutes * 60
    try:
        await asyncio.sleep(3)  # its metrics are served once it runs
        tasks = [
            asyncio.create_task(arrive(api, churn, tally, invariants, until=until)),
            asyncio.create_task(replace_nodes(api, churn, tally, invariants, until=until)),
            asyncio.create_task(janitor(api, churn, tally, until=until)),
            asyncio.create_task(preemptors(api, churn, tally, invariants, until=until)),
        ]
        samples = await sample(process, port, churn, tally, watch, started=started, until=until)
        await asyncio.gather(*tasks)
        # Invariants checked on what the watch saw, every gang's members as they went.
        broken = list(invariants.broken)
    finally:
        stop(process)
        await watch.stop()
    return {
        "churn": churn.__dict__
        | {
            "gangs_per_second": round(churn.gangs_per_second, 3),
            "most_waiting": churn.most_waiting,
            "preemptor_size": churn.preemptor_size,
        },
        "machine": f"{os.cpu_count()} cores",
        "tally": {k: v for k, v in tally.__dict__.items() if isinstance(v, int)},
        "longest_partial_seconds": invariants.longest_partial_seconds(now=time.monotonic()),
        "broken": broken,
        "samples": samples,
    }


def _quarter(samples: list[dict], key: str, part: int) -> float | None:
    values = [s[key] for s in samples if s[key] is not None]
    if len(values) < 4:
        return None
    size = len(values) // 4
    return statistics.median(values[part * size : (part + 1) * size])


def _ratio(last: float | None, first: float | None) -> str:
    return f"{last / first:.2f}" if last is not None and first else "-"


def _broken(broken: list[str]) -> str:
    return f"{len(broken)} broken (below)" if broken else "none broken"


def markdown(results: dict, name: str) -> str:
    churn, samples = results["churn"], results["samples"]
    lines = [
        f"# Soak: {churn['minutes']:g} minutes of churn at {churn['nodes']} nodes "
        f"(`python -m bench.soak`, {results['machine']})",
        "",
        f"Gangs of 1 to 32 pods (1 to 8 cpu each) arriving at {churn['gangs_per_second']} a "
        f"second to keep {churn['load']:.0%} of the cpu busy, each running about "
        f"{churn['lifetime']:g} s once bound, {churn['high_share']:.0%} of them at a higher "
        f"priority; an arrival held back while {churn['most_waiting']} gangs wait; every "
        f"{churn['preempt_every']:g} s a preemptor ({churn['preemptor_size']} pods of "
        f"{churn.get('preemptor_cpu', 4)} cpu at the higher priority); a node replaced "
        f"every {churn['node_every']:g} s; finished, timed-out and given-up "
        f"({churn['give_up']:g} s) gangs deleted.",
        "",
        *table(["", *results["tally"]], [["count", *results["tally"].values()]]),
        "",
        f"Invariants (no gang partly bound past 5 s, no node given more than it has): "
        f"{_broken(results['broken'])}; the longest a gang was partly bound: "
        f"{results['longest_partial_seconds']} s.",
        "",
        "## Flat or not: medians of the first and last quarters",
        "",
    ]
    flat = (
        ("RSS, MiB", "rss_mib"),
        ("longest event-loop stretch in a sample, s", "loop_stretch_max_s"),
        ("pass mean, ms", "pass_mean_ms"),
        ("pass p99, s (bucket bound)", "pass_p99_s"),
        ("pending gangs", "pending_gangs"),
    )
    lines += table(
        ["figure", "first quarter", "last quarter", "last / first"],
        (
            [title, first, last, _ratio(last, first)]
            for title, key in flat
            for first, last in [(_quarter(samples, key, 0), _quarter(samples, key, 3))]
        ),
    )
    lines += ["", "## Over time", ""]
    header = ["minute", "RSS MiB", "CPU s", "loop stretch max s", "passes", "pass mean ms"]
    header += ["pass p99 s", "pending gangs", "pods bound", "evicted", "held back"]
    step = max(len(samples) // 40, 1)
    lines += table(
        header,
        (
            [
                s["minute"],
                s["rss_mib"],
                s["cpu_seconds"],
                s["loop_stretch_max_s"],
                s["passes"],
                s["pass_mean_ms"],
                s["pass_p99_s"],
                f"{s['pending_gangs']:g}",
                s["pods_bound"],
                s["evicted"],
                s.get("held_back", "-"),
            ]
            for s in samples[::step]
        ),
    )
    if results["broken"]:
        lines += ["", "## Broken", "", *(f"- {b}" for b in results["broken"][:50])]
    lines.append("")
    return "\n".join(lines)


async def main_async(churn: Churn) -> dict:
    plane = local_cluster.up(SOAK_DIR)
    try:
        manifests = [
            node_manifest(FakeNode(name=f"soak-{i}"), cpu=str(NODE_CPU),
                          memory="256Gi")
            for i in range(churn.nodes)
        ]  # fmt: skip
        create_nodes(api_client(plane.kubeconfig), manifests)
        wait_ready(api_client(plane.kubeconfig), churn.nodes)
        api = ApiClient(load_credentials(str(plane.kubeconfig)), connections=32)
        try:
            return await soak(api, plane.kubeconfig, churn, log=SOAK_DIR / "logs" / "soak.log")
        finally:
            await api.close()
    finally:
        local_cluster.down(SOAK_DIR)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sample", type=float, default=30.0, help="seconds between samples")
    parser.add_argument(
        "--load",
        type=float,
        default=Churn.load,
        help="cpu asked by the arrivals, as a share of the cluster's",
    )
    parser.add_argument(
        "--backlog",
        type=int,
        default=0,
        help="arrivals held back while this many gangs wait (0: nodes / 20)",
    )
    parser.add_argument(
        "--preempt-every",
        type=float,
        default=Churn.preempt_every,
        help="seconds between preemptors",
    )
    parser.add_argument("--name", default="soak", help="bench/results/NAME.{json,md}")
    args = parser.parse_args(argv)
    churn = Churn(
        nodes=args.nodes,
        minutes=args.minutes,
        seed=args.seed,
        sample=args.sample,
        load=args.load,
        backlog=args.backlog,
        preempt_every=args.preempt_every,
    )
    # A SIGTERM (a CI job's timeout, a kill) unwinds as Ctrl-C does, through the finally
    # blocks that stop the scheduler and the control plane; by default it would leave both.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        results = asyncio.run(main_async(churn))
    except (local_cluster.ClusterError, ApiError, TimeoutError, RuntimeError) as error:
        print(f"soak failed: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("soak stopped before its end: no results written", file=sys.stderr)
        return 130
    write(args.name, results, markdown(results, args.name), quiet=False)
    return 1 if results["broken"] else 0


if __name__ == "__main__":
    sys.exit(main())
