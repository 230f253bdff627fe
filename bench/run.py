"""``make bench``: gang-scheduler beside its peers and the bind ceiling, on the local control plane.

One run, one control plane (in ``.cluster-bench/``, its API server keeping an audit log),
KWOK nodes (1,000 by default), and ``--rounds`` rounds (3 by default) of, in that order:

1. **Bind ceiling**: pods created for no scheduler, then bound by a trivial client that
   only POSTs bindings, round robin over the nodes, at our bind concurrency; then again
   with the bench's bind watch running ("watched"), timed first to last bind by that
   watch, as every scheduler is: on two cores the watch's CPU is not the binds'.
2. Then each scheduler in turn (bench/schedulers.py: gang-scheduler, kube-scheduler with
   its own gang scheduling, kube-scheduler with scheduler-plugins' Coscheduling as its
   example config and as tuned for contention), in an order that rotates from round to
   round, every one started fresh for every workload, its API client held to the same QPS
   and burst:

   - **Backlog, gangs of 8** (PodGroups) and **backlog, single pods**: the pods are
     created while the scheduler is stopped; the clock starts when the scheduler process
     is started and stops at the last bind (pods/s from process start, comparable with
     the ceiling), and also first to last bind.
   - **Latency, gangs of 8**: gangs created at a steady rate the API server sustains
     while the scheduler runs; for each gang, last member created to last member bound
     (p50, p99).
   - **Contention**: 8 GPUs a node, pods asking for all 8, so the cluster has room for
     K = nodes // 8 gangs of 8; 2K gangs are submitted while the scheduler runs, gang
     after gang ("in order") and all pods shuffled. Measured: gangs fully bound, gangs
     holding part of the cluster (some members bound, not all), time to the K-th whole
     gang, and pods sent back (a pod held a node at Permit, then was rejected: its
     FailedScheduling event says so).
   - **Backlog with volumes** (``--volume-pods``, 3,000 by default, in gangs of
     ``--volume-gangs`` 4 to 8; kube-scheduler's as single pods, its default profile): a
     backlog as above whose every pod names a claim of its own, of a WaitForFirstConsumer
     StorageClass; the bench's provisioner makes each volume on the node a scheduler chose
     and kube-controller-manager's PV controller (its client at the schedulers' QPS) binds
     it. Also checked: every bound pod's claim Bound to a volume on its node, and bound
     before the pod was (bench/volumes.py); a scheduler that breaks either fails.

   For each: the scheduler's CPU seconds (utime + stime from /proc) and peak RSS at its
   last bind and at its last write of the workload (bench/metering.py), and its API
   requests by verb and resource from start to last write (bench/audit.py). Throughout,
   every gang is checked whole and every node within its allocatable (bench/invariants.py):
   a scheduler that breaks either fails the workload, named, and the run exits non-zero.

Every figure is reported as the median over the rounds with min and max; a ratio to a peer
is claimed only when the two ranges do not overlap.

``--scale`` runs the scale tier instead: 5,000 nodes, 30,000 pods in gangs of mixed sizes
1 to 64, backlog (pods/s, time from process start to first bind, peak RSS) and latency
(p99), the same schedulers; to ``gang-scheduling-scale.{json,md}``.

Figures go to ``bench/results/gang-scheduling.{json,md}``; compare ratios within one run,
never absolute times across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench import audit
from bench.apiserver import (
    bind_round_robin,
    clear_namespace,
    create_pods,
    fresh_namespace,
    gather_limited,
)
from bench.invariants import PARTIAL_LIMIT_SECONDS, Invariants, allocatable_of
from bench.metering import Meter, Quiet, log_size, longest_loop_lag_ms, usage
from bench.pprof import Profiling
from bench.report import log, table, write
from bench.runs import Results, Round, Run
from bench.schedulers import (
    ASKED_FOR,
    BUILDERS,
    ClientLimits,
    Contender,
    contenders,
    skewed_control_plane,
    stop,
)
from bench.volumes import (
    BindOrder,
    Provisioning,
    claim_name,
    events_settled,
    gang_sizes,
    make_claims,
    volumes_of,
    with_claim,
)
from bench.volumes import check as check_volumes
from bench.volumes import clear as clear_volumes
from bench.volumes import timings as volume_timings
from bench.watching import BindWatch
from scheduler.shell.api import ApiClient, ApiError, load_credentials
from testbed import cluster as local_cluster
from testbed.nodes import GPU, api_client, create_nodes, layout, node_manifest, wait_ready

REPO = Path(__file__).resolve().parent.parent
BENCH_DIR = REPO / ".cluster-bench"
GPUS_PER_NODE = 8
CPU_REQUEST = {"cpu": "1"}
WHOLE_NODE = {"cpu": "1", GPU: str(GPUS_PER_NODE)}


@dataclass(frozen=True)
class Gangs:
    """A workload's pods: ``sizes[g]`` members in gang ``g`` (``None``: single pods, no
    PodGroup). Pod ``g{g}-{m}`` is member ``m`` of gang ``g``."""

    sizes: tuple[int, ...] | None
    singles: int = 0

    @staticmethod
    def of(size: int, pods: int) -> Gangs:
        return Gangs(sizes=(size,) * (pods // size)) if size > 1 else Gangs(None, singles=pods)

    @staticmethod
    def mixed(pods: int, *, largest: int, seed: int, smallest: int = 1) -> Gangs:
        """Gangs of ``smallest`` to ``largest`` members, drawn with ``seed``, ``pods`` in
        all: the last takes what is left (it may be smaller)."""
        rng = random.Random(seed)
        sizes: list[int] = []
        while sum(sizes) < pods:
            sizes.append(min(rng.randint(smallest, largest), pods - sum(sizes)))
        return Gangs(sizes=tuple(sizes))

    @property
    def pods(self) -> int:
        return sum(self.sizes) if self.sizes is not None else self.singles

    def members(self) -> dict[str, list[str]]:
        if self.sizes is None:
            return {f"p-{i}": [f"p-{i}"] for i in range(self.singles)}
        return {f"g{g}": [f"g{g}-{m}" for m in range(size)] for g, size in enumerate(self.sizes)}

    def whole(self, bound: dict[str, float]) -> list[str]:
        return [g for g, pods in self.members().items() if all(p in bound for p in pods)]


async def submit(
    api: ApiClient,
    contender: Contender,
    *,
    namespace: str,
    gangs: Gangs,
    requests: dict[str, str],
    concurrency: int,
    rate: float | None = None,
    shuffle: random.Random | None = None,
    each_pod: Callable[[dict], dict] | None = None,
) -> dict[str, float]:
    """Create the PodGroups, then the pods (gang after gang, or shuffled; ``each_pod``: a last
    touch to each pod's manifest); returns when each pod's creation was acknowledged."""
    if gangs.sizes is not None:
        posts = [
            contender.podgroup(namespace=namespace, name=f"g{g}", size=size, requests=requests)
            for g, size in enumerate(gangs.sizes)
        ]
        await gather_limited(concurrency, [api.post(p, body, retries=3) for p, body in posts])
    manifests = [
        contender.pod(pod, gang=gang if gangs.sizes is not None else None, requests=requests)
        for gang, pods in gangs.members().items()
        for pod in pods
    ]
    if each_pod is not None:
        manifests = [each_pod(m) for m in manifests]
    if shuffle is not None:
        shuffle.shuffle(manifests)
    return await create_pods(api, namespace, manifests, concurrency=concurrency, rate=rate)


class Unfinished(TimeoutError):
    """A scheduler ran out of time: what it did meanwhile goes into the results too."""

    def __init__(self, message: str, figures: dict) -> None:
        super().__init__(message)
        self.figures = figures


def partial(
    bound_at: dict[str, float], pods: int, started: float, process: subprocess.Popen[bytes]
) -> dict:
    """How far a scheduler got before the timeout: pods bound, how soon the first one,
    and what it used (a scheduler that exited has nothing to read)."""
    figures: dict = {"pods_bound": len(bound_at), "pods": pods}
    if bound_at:
        figures["start_to_first_bind_seconds"] = _rounded(min(bound_at.values()) - started)
    with contextlib.suppress(RuntimeError, OSError):
        figures |= usage(process)
    return figures


@dataclass(frozen=True)
class Setting:
    """What every workload of a run shares."""

    api: ApiClient
    nodes: tuple[str, ...]
    logs: Path
    concurrency: int
    timeout: float
    # Under contention a scheduler may never get K gangs whole (it keeps holding nodes for
    # gangs that cannot complete): that is a result, not worth the general timeout.
    contention_timeout: float = 120.0
    # Every node's allocatable (our base units): the invariants' overcommit check.
    allocatable: dict[str, dict[str, int]] = field(default_factory=dict)
    # The API server's audit log (None: the control plane keeps none, and no requests and
    # no last write are reported); how long a scheduler must write nothing after its last
    # bind to be taken as done, and how long that is waited for at most.
    audit_log: Path | None = None
    quiet: float = 5.0
    quiet_cap: float = 30.0
    # Namespaces of workloads that ran, cleared before the next one starts (``fresh``): the
    # last of a run is never cleared, as its control plane goes down with it (30,000 pods
    # took over 13 minutes to delete at 5,000 nodes).
    left: list[str] = field(default_factory=list)
    # Those of them with claims (the backlog with volumes): their claims, volumes and
    # StorageClass go too, once their pods are gone.
    with_volumes: set[str] = field(default_factory=set)
    # Where a Go peer's profiles go while it runs a backlog (``--pprof``); None: none taken.
    pprof: Path | None = None


async def fresh(setting: Setting, name: str) -> str:
    """A new namespace for a workload, once those of the workloads before are cleared (a
    workload left behind would load every later one)."""
    while setting.left:
        await clear_namespace(setting.api, setting.left[0])
        if setting.left[0] in setting.with_volumes:
            await clear_volumes(setting.api, setting.left[0], concurrency=setting.concurrency)
            setting.with_volumes.discard(setting.left[0])
        setting.left.pop(0)
    return await fresh_namespace(setting.api, name)


class Broken(RuntimeError):
    """A scheduler left a gang partly bound or overcommitted a node: the run fails, and
    what it did meanwhile goes into the results too."""

    def __init__(self, message: str, figures: dict) -> None:
        super().__init__(message)
        self.figures = figures


def _invariants(setting: Setting, gangs: Gangs) -> Invariants:
    members = gangs.members() if gangs.sizes is not None else {}
    return Invariants(
        allocatable=setting.allocatable,
        gangs=members,
        minimum={g: len(pods) for g, pods in members.items()},
    )


def _verdict(contender: Contender, invariants: Invariants, figures: dict, *, at: float) -> None:
    """Raise Broken if ``contender`` broke an invariant in this workload (``figures`` go
    with it); otherwise add the longest a gang was partly bound to ``figures``. ``at``: when
    the scheduler was last watched running."""
    figures["longest_partly_bound_ms"] = round(invariants.longest_partial_seconds(now=at) * 1000)
    broken = invariants.check(now=at)
    if broken:
        more = f"; and {len(broken) - 5} more" if len(broken) > 5 else ""
        raise Broken(f"{contender.label} broke the bench's invariants: "
                     + "; ".join(broken[:5]) + more, figures)  # fmt: skip


async def _all_bound(
    watch: BindWatch,
    *,
    invariants: Invariants,
    contender: Contender,
    started: float,
    scheduler: subprocess.Popen[bytes],
    pods: int,
    timeout: float,
) -> None:
    """Until every pod is bound; a scheduler that runs out of time raises Unfinished with how
    far it got, once its invariants are checked (a gang it left partly bound is Broken,
    raised here, not merely unfinished)."""
    try:
        await watch.wait_for(pods, timeout=timeout)
    except TimeoutError as error:
        figures = partial(watch.bound_at, pods, started, scheduler)
        _verdict(contender, invariants, figures, at=await _gangs_settled(watch, invariants))
        raise Unfinished(str(error), figures) from error


async def _gangs_settled(watch: BindWatch, invariants: Invariants) -> float:
    """Before the scheduler is stopped: wait (at most the partial limit) for gangs it is
    binding right now to be whole, so that stopping it does not cut one in half and blame it
    on the scheduler; when the wait ended."""
    with contextlib.suppress(TimeoutError):
        await watch.wait_until(
            lambda: not invariants.partly_bound(),
            timeout=invariants.partial_limit,
            what="gangs partly bound",
        )
    return time.monotonic()


async def _to_quiescence(
    setting: Setting, meter: Meter, *, watched_last_bind: float
) -> tuple[Quiet, dict]:
    """The window's second end: the scheduler's last write (and last Event), CPU and peak
    RSS at it, the scheduler's own metrics. The last bind and the last write are both taken
    from the audit log, as the API server received them, so that the time between them is
    measured by one observer (the bench's watch lags by a varying amount)."""
    quiet = await meter.quiescence(
        watched_last_bind=watched_last_bind, quiet=setting.quiet, cap=setting.quiet_cap
    )
    figures: dict = {**meter.at(watched_last_bind)}
    figures |= await asyncio.to_thread(meter.scrape)
    if setting.audit_log is None:
        return quiet, figures
    figures["quiet"] = quiet.last_write is not None
    if quiet.last_write is not None:
        after = max(quiet.last_write - quiet.last_bind, 0.0)
        figures["last_write_after_last_bind_seconds"] = _rounded(after)
        figures |= {f"{k}_at_last_write": v for k, v in meter.at(quiet.last_write).items()}
    # Events: every scheduler posts one per pod bound, the write all of them share.
    event = meter.last(what="events")
    if event is not None and event <= quiet.until:
        after = max(event - quiet.last_bind, 0.0)
        figures["last_event_after_last_bind_seconds"] = _rounded(after)
    return quiet, figures


async def _wind_up(
    setting: Setting,
    *,
    scheduler: subprocess.Popen[bytes],
    meter: Meter,
    watch: BindWatch,
    namespace: str,
    quiet: Quiet | None,
) -> dict:
    """Whatever happened: stop the scheduler, the meter and the watch, leave the namespace to
    be cleared before the next workload (``fresh``); and if the window was measured, the
    scheduler's requests in it (read once it stopped: a watch is logged when it ends)."""
    try:
        stop(scheduler)
        await meter.stop()
        await watch.stop()
        if quiet is None:
            return {}
        await asyncio.sleep(1.0)
        counted = meter.counted(until=quiet.until)
        if not counted:
            return {}
        return {"api_requests": counted, "api_requests_total": counted["total"]}
    finally:
        setting.left.append(namespace)


@contextlib.asynccontextmanager
async def _profiled(setting: Setting, contender: Contender, *, name: str) -> AsyncIterator[None]:
    """A Go peer's profiles taken while the body runs (``--pprof``); nothing otherwise."""
    if setting.pprof is None or contender.pprof_port is None:
        yield
        return
    folder, prefix = setting.pprof, f"{contender.key}-{name}"
    profiling = Profiling(port=contender.pprof_port, folder=folder, prefix=prefix).start()
    try:
        yield
    finally:
        await profiling.stop()
        missed = f"; not taken: {profiling.failures[-1]}" if profiling.failures else ""
        log(f"{contender.label}: {len(profiling.taken)} files of pprof in {folder}{missed}")


def _scheduler_log(setting: Setting, contender: Contender) -> Path:
    return setting.logs / f"{contender.key}.log"


def _rounded(seconds: float) -> float:
    return round(seconds, 3)


async def bind_ceiling(setting: Setting, *, pods: int, watched: bool = False) -> dict:
    """The trivial client's rate, timed by its own POSTs; ``watched``: with the bench's
    bind watch running, as every scheduler is timed, and also first to last bind as that
    watch saw them. On two cores the watch (a JSON stream of every pod change, decoded by
    the bench, encoded and sent by the API server) takes CPU from the binds: the schedulers
    pay for it, and the plain ceiling does not."""
    api = setting.api
    namespace = await fresh(setting, "bench-ceiling")
    manifests = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p-{i}"},
            "spec": {
                "schedulerName": "nobody",
                "containers": [
                    {"name": "main", "image": "busybox", "resources": {"requests": CPU_REQUEST}}
                ],
            },
        }
        for i in range(pods)
    ]
    await create_pods(api, namespace, manifests, concurrency=setting.concurrency)
    watch = BindWatch(api, namespace)
    try:
        if watched:
            await watch.start().until_listed(timeout=120)
        elapsed = await bind_round_robin(
            api, namespace, nodes=setting.nodes, pods=pods, concurrency=setting.concurrency
        )
        if watched:
            await watch.wait_for(pods, timeout=setting.timeout)
    finally:
        await watch.stop()
        setting.left.append(namespace)
    figures = {
        "pods": pods,
        "seconds": round(elapsed, 2),
        "pods_per_second": round(pods / elapsed, 1),
    }
    if watched:
        first, last = watch.span()
        figures["pods_per_second_first_to_last_bind"] = round(pods / max(last - first, 1e-3), 1)
    return figures


async def watched_ceiling(setting: Setting, *, pods: int) -> dict | None:
    """The ceiling timed as the schedulers are, or None if the watch failed: the targets are
    against the plain ceiling, so a failed watch leaves this one out (said in the log), not
    the whole run."""
    try:
        return await bind_ceiling(setting, pods=pods, watched=True)
    except (TimeoutError, ApiError) as error:
        log(f"no watched ceiling: {type(error).__name__}: {error}")
        return None


async def backlog(
    setting: Setting, contender: Contender, *, name: str, gangs: Gangs, volumes: bool = False
) -> dict:
    """Pods created while the scheduler is stopped; timed from its process start to the last
    bind, and to its last write. ``volumes``: every pod names a claim of its own, of a
    WaitForFirstConsumer class, its volume made by the bench's provisioner once a scheduler
    chose its node (bench/volumes.py), and each checked bound on its pod's node before its
    pod."""
    api = setting.api
    namespace = await fresh(setting, f"{name}-{contender.key}")
    storage = await _claims_made(setting, namespace, gangs) if volumes else None
    await submit(
        api,
        contender,
        namespace=namespace,
        gangs=gangs,
        requests=CPU_REQUEST,
        concurrency=setting.concurrency,
        each_pod=with_claim if volumes else None,
    )
    invariants = _invariants(setting, gangs)
    watching = BindOrder if volumes else BindWatch
    watch = await watching(api, namespace, invariants=invariants).start().until_listed(timeout=120)
    provisioner: Provisioning | None = None
    if storage is not None:
        provisioner = Provisioning(api, namespace, storage)
        try:
            await events_settled(api, namespace, at_least=gangs.pods)
            await provisioner.start().until_listed(timeout=120)
        except BaseException:  # no scheduler started: nothing of it to wind up
            await provisioner.stop()
            await watch.stop()
            setting.left.append(namespace)
            raise
    log_path = _scheduler_log(setting, contender)
    offset = log_size(log_path)
    started = time.monotonic()
    scheduler = contender.start(log_path)
    meter = Meter(scheduler, setting.audit_log, contender.metrics_port, started=started).start()
    quiet: Quiet | None = None
    try:
        async with _profiled(setting, contender, name=name):
            await _all_bound(
                watch, invariants=invariants, contender=contender, started=started,
                scheduler=scheduler, pods=gangs.pods, timeout=setting.timeout,
            )  # fmt: skip
        usage(scheduler)  # still running
        quiet, used = await _to_quiescence(setting, meter, watched_last_bind=watch.span()[1])
        checked_at = await _gangs_settled(watch, invariants)
        if provisioner is not None:
            assert isinstance(watch, BindOrder)
            claimed = await _volumes_checked(setting, contender, watch, provisioner, namespace)
    finally:
        if provisioner is not None:
            await provisioner.stop()
        counted = await _wind_up(
            setting, scheduler=scheduler, meter=meter, watch=watch, namespace=namespace,
            quiet=quiet,
        )  # fmt: skip
    used |= counted | longest_loop_lag_ms(log_path, offset)
    figures = _backlog_figures(gangs, watch, started=started, used=used)
    if provisioner is not None:
        figures |= claimed
    _verdict(contender, invariants, figures, at=checked_at)
    if provisioner is not None and (count := claimed["volume_problem_count"]):
        more = f"; and {count - 5} more" if count > 5 else ""
        raise Broken(f"{contender.label} left pods without their volumes, or bound them "
                     "first: " + "; ".join(claimed["volume_problems"][:5]) + more,
                     figures)  # fmt: skip
    return figures


def _backlog_figures(gangs: Gangs, watch: BindWatch, *, started: float, used: dict) -> dict:
    """A backlog's figures: to the last bind from the process start and from the first bind,
    to the last write and the last Event, with what the scheduler used (``used``)."""
    first, last = watch.span()
    figures = {
        "pods": gangs.pods,
        "gangs": len(gangs.sizes) if gangs.sizes else 0,
        "gangs_whole": len(gangs.whole(watch.bound_at)) if gangs.sizes else 0,
        "seconds": round(last - started, 2),
        "pods_per_second": round(gangs.pods / (last - started), 1),
        "start_to_first_bind_seconds": _rounded(first - started),
        "first_to_last_bind_seconds": _rounded(last - first),
        "pods_per_second_first_to_last_bind": round(gangs.pods / max(last - first, 1e-3), 1),
        **used,
    }
    if "last_write_after_last_bind_seconds" in figures:
        to_write = last - started + figures["last_write_after_last_bind_seconds"]
        figures["seconds_to_last_write"] = round(to_write, 2)
        figures["pods_per_second_to_last_write"] = round(gangs.pods / to_write, 1)
    if "last_event_after_last_bind_seconds" in figures:
        to_event = last - started + figures["last_event_after_last_bind_seconds"]
        figures["seconds_to_last_event"] = round(to_event, 2)
        figures["pods_per_second_to_last_event"] = round(gangs.pods / to_event, 1)
    if "api_requests_total" in figures:
        figures["api_requests_per_pod"] = round(figures["api_requests_total"] / gangs.pods, 2)
    return figures


async def _claims_made(setting: Setting, namespace: str, gangs: Gangs) -> str:
    """The backlog with volumes' StorageClass and a claim for each of its pods (to be cleared
    with the namespace); the class's name."""
    setting.with_volumes.add(namespace)
    pods = [pod for members in gangs.members().values() for pod in members]
    return await make_claims(setting.api, namespace, pods, concurrency=setting.concurrency)


async def _volumes_checked(
    setting: Setting,
    contender: Contender,
    watch: BindOrder,
    provisioner: Provisioning,
    namespace: str,
) -> dict:
    """Once every pod is bound: each one's claim Bound on its node, and bound before it
    (bench/volumes.py's ``check``), and where the time went; ``volume_problems`` says what
    is wrong, the first 20 (the run then fails, as for a broken invariant)."""
    await provisioner.wait_bound(
        (claim_name(pod) for pod in watch.nodes), timeout=min(setting.timeout, 60.0)
    )
    verdict = check_volumes(
        pods=watch.nodes,
        pod_bound=watch.seen,
        claim_bound=provisioner.bound,
        claims=provisioner.claims,
        volumes=await volumes_of(setting.api, namespace),
    )
    figures = {
        "claims": len(provisioner.claims),
        "volumes_made": len(provisioner.made),
        "provisioning_errors": provisioner.errors[:5],
        **verdict.figures(),
        **volume_timings(
            pod_bound=watch.seen, selected=provisioner.selected, claim_bound=provisioner.bound
        ),
        "volume_problem_count": len(verdict.problems),
        "volume_problems": list(verdict.problems[:20]),
    }
    if verdict.problems:
        log(f"{contender.label}: {len(verdict.problems)} volume problems, the first: "
            f"{verdict.problems[0]}")  # fmt: skip
    return figures


async def latency(
    setting: Setting, contender: Contender, *, name: str, gangs: Gangs, rate: float
) -> dict:
    """Gangs created at ``rate`` pods a second while the scheduler runs."""
    api = setting.api
    namespace = await fresh(setting, f"{name}-{contender.key}")
    log_path = _scheduler_log(setting, contender)
    offset = log_size(log_path)
    started = time.monotonic()
    scheduler = contender.start(log_path)
    meter = Meter(scheduler, setting.audit_log, contender.metrics_port).start()
    invariants = _invariants(setting, gangs)
    watch = BindWatch(api, namespace, invariants=invariants).start()
    quiet: Quiet | None = None
    try:
        await asyncio.sleep(3)  # let the scheduler list the cluster before the gangs come
        created = await submit(
            api,
            contender,
            namespace=namespace,
            gangs=gangs,
            requests=CPU_REQUEST,
            concurrency=setting.concurrency,
            rate=rate,
        )
        creation_complete = time.monotonic()
        await _all_bound(
            watch, invariants=invariants, contender=contender, started=started,
            scheduler=scheduler, pods=gangs.pods, timeout=setting.timeout,
        )  # fmt: skip
        usage(scheduler)  # still running
        last = max(watch.bound_at.values())
        quiet, used = await _to_quiescence(setting, meter, watched_last_bind=last)
        checked_at = await _gangs_settled(watch, invariants)
    finally:
        counted = await _wind_up(
            setting, scheduler=scheduler, meter=meter, watch=watch, namespace=namespace,
            quiet=quiet,
        )  # fmt: skip
    used |= counted | longest_loop_lag_ms(log_path, offset)
    per_gang = sorted(
        max(watch.bound_at[p] for p in pods) - max(created[p] for p in pods)
        for pods in gangs.members().values()
    )
    last_bind = max(watch.bound_at.values())
    figures = {
        "pods": gangs.pods,
        "gangs": len(per_gang),
        "gangs_whole": len(gangs.whole(watch.bound_at)),
        "creation_rate_pods_per_second": rate,
        "creation_seconds": round(creation_complete - min(created.values()), 2),
        "drain_after_creation_seconds": _rounded(max(last_bind - creation_complete, 0.0)),
        "gang_latency_p50_ms": round(statistics.median(per_gang) * 1000, 1),
        "gang_latency_p99_ms": round(per_gang[max(int(len(per_gang) * 0.99) - 1, 0)] * 1000, 1),
        # The p99 of 250 gangs leaves the worst two out: one gang that waited minutes shows
        # only here (and in the drain).
        "gang_latency_max_ms": round(per_gang[-1] * 1000, 1),
        **used,
    }
    _verdict(contender, invariants, figures, at=checked_at)
    return figures


# How kube-scheduler's framework (v1.34 and v1.36 alike) words the rejection of a pod that
# waited at Permit with a node held for it: the Permit timeout, and Coscheduling's rejections
# of a gang's waiting members when one member fails (PostFilter) or is unreserved.
SENT_BACK = (
    "rejected due to timeout after waiting",
    "optimistic rejection in postfilter",
    "rejection in unreserve",
)


def _sent_back(events: list[dict]) -> int:
    """Pods sent back to the queue after a node was held for them at Permit: the work a
    gang scheduler wastes under contention. gang-scheduler has no Permit stage (it binds a
    gang only once every member has a node), so it never sends a pod back this way."""
    pods = {
        e.get("involvedObject", {}).get("name")
        for e in events
        if e.get("reason") == "FailedScheduling"
        and any(w in (e.get("message") or "").lower() for w in SENT_BACK)
    }
    return len(pods - {None})


async def contention(
    setting: Setting, contender: Contender, *, shuffled: bool, settle: float, seed: int
) -> dict:
    """Room for K gangs of 8 (each pod takes a node's GPUs), 2K gangs submitted."""
    api = setting.api
    room = len(setting.nodes) // 8
    gangs = Gangs.of(8, 2 * room * 8)
    name = "contention-shuffled" if shuffled else "contention-in-order"
    namespace = await fresh(setting, f"{name}-{contender.key}")
    scheduler = contender.start(_scheduler_log(setting, contender))
    meter = Meter(scheduler, setting.audit_log, contender.metrics_port).start()
    invariants = _invariants(setting, gangs)
    watch = BindWatch(api, namespace, invariants=invariants).start()
    kth: float | None = None
    quiet: Quiet | None = None
    try:
        await asyncio.sleep(3)
        started = time.monotonic()
        await submit(
            api,
            contender,
            namespace=namespace,
            gangs=gangs,
            requests=WHOLE_NODE,
            concurrency=setting.concurrency,
            shuffle=random.Random(seed) if shuffled else None,
        )
        with contextlib.suppress(TimeoutError):
            await watch.wait_until(
                lambda: len(gangs.whole(watch.bound_at)) >= room,
                timeout=setting.contention_timeout,
                what=f"waiting for {room} whole gangs",
            )
        whole = gangs.whole(watch.bound_at)
        if len(whole) >= room:
            kth = sorted(max(watch.bound_at[p] for p in gangs.members()[g]) for g in whole)[
                room - 1
            ]
        await asyncio.sleep(settle)  # what else binds once the room is taken
        usage(scheduler)  # still running
        last = max(watch.bound_at.values(), default=time.monotonic())
        quiet, used = await _to_quiescence(setting, meter, watched_last_bind=last)
        checked_at = await _gangs_settled(watch, invariants)
        events = (await api.request("GET", f"/api/v1/namespaces/{namespace}/events"))["items"]
    finally:
        counted = await _wind_up(
            setting, scheduler=scheduler, meter=meter, watch=watch, namespace=namespace,
            quiet=quiet,
        )  # fmt: skip
    used |= counted
    figures = {
        "room_gangs": room,
        "gangs_submitted": len(gangs.sizes or ()),
        "order": "shuffled" if shuffled else "in order",
        "gangs_whole": len(gangs.whole(watch.bound_at)),
        "gangs_partly_bound": len(invariants.partly_bound()),
        "pods_bound": len(watch.bound_at),
        "seconds_to_kth_whole_gang": None if kth is None else _rounded(kth - started),
        "pods_sent_back": _sent_back(events),
        # What the scheduler said of the pods it did not place, a few distinct messages.
        "failed_scheduling_messages": sorted(
            {e.get("message", "")[:200] for e in events if e.get("reason") == "FailedScheduling"}
        )[:4],
        **used,
    }
    _verdict(contender, invariants, figures, at=checked_at)
    return figures


async def each(
    setting: Setting,
    peers: list[Contender],
    *,
    name: str,
    workload: Callable[[Contender], Awaitable[dict]],
) -> dict:
    """Run ``workload`` for every scheduler; a scheduler that fails it (times out, exits)
    gets its error recorded and the run goes on with the next."""
    out: dict = {}
    for contender in peers:
        log(f"{name}: {contender.label}")
        try:
            out[contender.key] = await workload(contender)
        except Exception as error:  # one workload of one scheduler, not the whole run
            log(f"{contender.label} failed: {error}")
            if not isinstance(error, TimeoutError | RuntimeError | ApiError):
                traceback.print_exc()
            kind = "TimeoutError" if isinstance(error, Unfinished) else type(error).__name__
            out[contender.key] = {"error": f"{kind}: {error}", **getattr(error, "figures", {})}
        log(f"{contender.label}: {out[contender.key]}")
    return out


async def workloads(setting: Setting, peers: list[Contender], args: argparse.Namespace) -> dict:
    """The standard tier: every workload for every scheduler (the smoke: a few of them)."""

    async def gangs_of_8(c: Contender) -> dict:
        return await backlog(setting, c, name="gangs", gangs=Gangs.of(8, args.pods))

    async def single_pods(c: Contender) -> dict:
        return await backlog(setting, c, name="singles", gangs=Gangs.of(1, args.pods))

    async def steady(c: Contender) -> dict:
        gangs = Gangs.of(8, args.latency_pods)
        return await latency(setting, c, name="latency", gangs=gangs, rate=args.latency_rate)

    async def in_order(c: Contender) -> dict:
        return await contention(setting, c, shuffled=False, settle=args.settle, seed=args.seed)

    async def shuffled(c: Contender) -> dict:
        return await contention(setting, c, shuffled=True, settle=args.settle, seed=args.seed)

    async def with_volumes(c: Contender) -> dict:
        gangs = volume_gangs(c, args)
        return await backlog(setting, c, name="volumes", gangs=gangs, volumes=True)

    plan = {
        "backlog_gangs_of_8": gangs_of_8,
        "backlog_single_pods": single_pods,
        "latency_gangs_of_8": steady,
        "contention_in_order": in_order,
        "contention_shuffled": shuffled,
        "backlog_volumes": with_volumes,
    }
    if args.smoke:
        plan = {k: plan[k] for k in ("backlog_gangs_of_8", "latency_gangs_of_8",
                                     "contention_shuffled")}  # fmt: skip
    if args.workload:
        plan = {k: v for k, v in plan.items() if k in args.workload}
    return {
        key: await each(setting, peers, name=key, workload=workload)
        for key, workload in plan.items()
    }


# Who runs the backlog with volumes as single pods, no PodGroup (#45: "against kube-scheduler
# v1.36, single pods"), its default profile binding their volumes (VolumeBinding).
VOLUMES_AS_SINGLE_PODS = frozenset({"kube_scheduler"})


def volume_gangs(contender: Contender, args: argparse.Namespace) -> Gangs:
    """The backlog with volumes' pods: ``--volume-pods`` in gangs of ``--volume-gangs``
    sizes (seeded), or as many single pods for those of ``VOLUMES_AS_SINGLE_PODS``."""
    smallest, largest = args.volume_gangs
    gangs = Gangs.mixed(args.volume_pods, smallest=smallest, largest=largest, seed=args.seed)
    return Gangs(None, singles=gangs.pods) if contender.key in VOLUMES_AS_SINGLE_PODS else gangs


async def scale_workloads(
    setting: Setting, peers: list[Contender], args: argparse.Namespace
) -> dict:
    """The scale tiers: gangs of mixed sizes 1 to 64 (``--scale``), 1 to 256 (``--scale-xl``)."""
    gangs = Gangs.mixed(args.pods, largest=args.largest_gang, seed=args.seed)

    async def mixed_backlog(c: Contender) -> dict:
        return await backlog(setting, c, name="scale", gangs=gangs)

    async def mixed_latency(c: Contender) -> dict:
        return await latency(setting, c, name="scale-latency", gangs=gangs, rate=args.latency_rate)

    plan = {"backlog_mixed_gangs": mixed_backlog, "latency_mixed_gangs": mixed_latency}
    if args.workload:
        plan = {k: v for k, v in plan.items() if k in args.workload}
    return {
        key: await each(setting, peers, name=key, workload=workload)
        for key, workload in plan.items()
    }


def _spread(values: list[float]) -> str:
    """One figure over the rounds: the value, or the median with min and max."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:g}"
    return f"{statistics.median(values):g} ({min(values):g} to {max(values):g})"


def _ceiling_ratios(results: Results, workload: str, scheduler: str, key: str, ceiling: str) -> str:
    """``key`` over the round's own ceiling (``pods_per_second`` of ``ceiling``), per round."""
    ratios = []
    figure = (
        "pods_per_second_first_to_last_bind"
        if ceiling == "bind_ceiling_watched"
        else "pods_per_second"
    )
    for one in results.rounds:
        run = one.run(workload, scheduler)
        bound = one.ceiling(ceiling, figure)
        value = run.number(key) if run is not None else None
        if value and bound:
            ratios.append(round(value / bound, 2))
    return _spread(ratios)


def _versus(
    results: Results, workload: str, mine: str, theirs: str, *, key: str, higher: bool
) -> str:
    """How many times better ``mine`` is than ``theirs`` on ``key``, round by round (the
    same round's runs compared); with several rounds the median with min and max, and
    claimed only when the two schedulers' ranges of ``key`` do not overlap."""
    ratios = []
    for one in results.rounds:
        a, b = one.run(workload, mine), one.run(workload, theirs)
        x = a.number(key) if a is not None else None
        y = b.number(key) if b is not None else None
        if not x or not y:
            continue
        ratios.append(round(x / y if higher else y / x, 2))
    if not ratios:
        return "-"
    if key in ENDS_AT_LAST_WRITE and (
        results.loud(workload, mine) or results.loud(workload, theirs)
    ):
        return _spread(ratios) + ", not quiet in every round"
    if mine == theirs or len(results.rounds) == 1:
        return _spread(ratios)
    if len(ratios) == 1:
        return _spread(ratios) + ", 1 round"
    ours = results.figures(workload, mine, key)
    other = results.figures(workload, theirs, key)
    apart = min(ours) > max(other) or max(ours) < min(other)
    return _spread(ratios) + ("" if apart else ", ranges overlap")


# Figures that end at the scheduler's last write: a round where it never went quiet has none
# (or, for the last Event, only the last one within the cap), and says so.
ENDS_AT_LAST_WRITE = frozenset({
    "seconds_to_last_write", "pods_per_second_to_last_write",
    "last_write_after_last_bind_seconds", "cpu_seconds_at_last_write",
    "peak_rss_mib_at_last_write", "seconds_to_last_event", "pods_per_second_to_last_event",
    "last_event_after_last_bind_seconds", "api_requests_total", "api_requests_per_pod",
})  # fmt: skip


def _cell(results: Results, workload: str, scheduler: str, key: str) -> str:
    values = results.figures(workload, scheduler, key)
    if key in ENDS_AT_LAST_WRITE and (loud := results.loud(workload, scheduler)):
        cap = results.setting("quiet_cap_seconds", 0)
        note = f"still writing {cap:g} s after its last bind"
        return note if not values else f"{_spread(values)}; {note} in {loud} rounds"
    if key == "seconds_to_kth_whole_gang":
        missed = sum(1 for r in results.runs(workload, scheduler) if r.figures.get(key, 0) is None)
        if missed:
            limit = results.setting("contention_timeout_seconds")
            note = f"not in {limit:g} s" if limit else "not reached"
            return note if not values else f"{_spread(values)}; {note} in {missed} rounds"
    return _spread(values)


def _table(
    results: Results,
    workload: str,
    *,
    columns: list[tuple[str, str]],
    figure: str,
    higher: bool,
    ceiling: list[tuple[str, str, str]] = (),
) -> list[str]:
    """One row per scheduler; ``figure`` compared as ratios to every scheduler (each ratio
    says how many times better the row is: higher pods/s, or lower latency); ``ceiling``:
    (title, figure, which ceiling) columns of a figure over the round's bind ceiling."""
    peers = results.ran(workload)
    if not peers:
        return []
    header = ["scheduler", *(c for c, _ in columns), *(c for c, _, _ in ceiling)]
    header += [f"x {results.label(k)}" for k in peers]
    rows = []
    for key in peers:
        if failed := results.failure(workload, key):
            rows.append([results.label(key), failed])  # no figures: its error is its row
            continue
        cells = [results.label(key), *(_cell(results, workload, key, k) for _, k in columns)]
        cells += [_ceiling_ratios(results, workload, key, k, c) for _, k, c in ceiling]
        cells += [_versus(results, workload, key, o, key=figure, higher=higher) for o in peers]
        rows.append(cells)
    return table(header, rows)


def _requests_table(results: Results, workload: str) -> list[str]:
    """The API requests each scheduler made in the window, by verb and resource (the
    API server's audit log), median over rounds."""
    peers = results.ran(workload)
    kinds: dict[str, None] = {}
    counts: dict[tuple[str, str], list[float]] = {}
    usable = {  # each scheduler's requests in the rounds it finished and counted them
        key: [made for r in results.runs(workload, key) if (made := r.requests) is not None]
        for key in peers
    }
    for runs in usable.values():
        for made in runs:
            for kind in made:
                kinds.setdefault(kind, None)
    for key, runs in usable.items():
        for made in runs:
            for kind in kinds:  # none in a round is 0 in that round
                counts.setdefault((key, kind), []).append(made.get(kind, 0))
    if not kinds:
        return []
    return table(
        ["request", *(results.label(k) for k in peers)],
        ([kind, *(_spread(counts.get((k, kind), [])) for k in peers)] for kind in kinds),
    )


VOLUME_COLUMNS = [
    ("pods", "pods"),
    ("claims Bound on their pod's node", "claims_on_pod_node"),
    ("pods bound before their claim", "pods_bound_before_claim"),
    ("order not read", "bind_order_unchecked"),
    ("node chosen to claim bound p50 ms", "claim_binding_p50_ms"),
    ("p99 ms", "claim_binding_p99_ms"),
    ("claim bound to pod bound p50 ms", "bind_after_claim_p50_ms"),
    ("p99 ms", "bind_after_claim_p99_ms"),
]


def _volumes_section(results: Results, key: str) -> list[str]:
    """The backlog with volumes' own table, and what it is."""
    qps = (results.setting("client") or {}).get("qps", 0)
    rows = _table(results, key, columns=VOLUME_COLUMNS, figure="bind_after_claim_p99_ms",
                  higher=False)  # fmt: skip
    return [
        "",
        "Volumes (ratios: claim bound to pod bound, p99):",
        "",
        *rows,
        "",
        "Every pod names a claim of its own, created with it, of a StorageClass that binds "
        "WaitForFirstConsumer; kube-scheduler's pods are single pods (no PodGroup), its "
        "default profile binding their volumes (VolumeBinding), the others' are gangs. When "
        "a scheduler writes a claim's selected node, the bench's provisioner (the same for "
        "every scheduler: a watch of the claims, several volumes made at once) makes a "
        "volume reachable from that node alone, and kube-controller-manager's PV controller "
        f"(client QPS {qps:g}, as the schedulers') "
        "binds the claim to it: every pod waits on the control plane, which may set the "
        "pace. Node chosen to claim bound is that wait; claim bound to pod bound is the "
        "scheduler's own (kube-scheduler's VolumeBinding looks once a second). Checked: "
        "every bound pod's claim Bound to a volume on its node, and bound (volumeName and "
        "bind-completed) at an earlier resourceVersion than the pod's binding; a pod whose "
        "order was read from a LIST, not a watch event, is counted as not read.",
    ]


def markdown(results: Results) -> str:
    rounds = results.rounds
    settings = results.settings
    limits = settings["client"]
    many = len(rounds) > 1
    lines = [
        f"# Gang scheduling bench ({settings['nodes']} KWOK nodes, {settings['machine']}, "
        f"control plane {settings.get('control_plane', '?')})",
        "",
        "Every scheduler started fresh for every workload, its API client held to "
        f"QPS {limits['qps']:g} and burst {limits['burst']} (ours: --kube-api-qps, "
        "--kube-api-burst; kube-scheduler: clientConnection). Ratios (x) say how many times "
        "better the row is than the column: pods/s over pods/s, or latency over latency.",
    ]
    if many:
        orders = "; ".join(" → ".join(results.label(k) for k in one.order) for one in rounds)
        lines += [
            "",
            f"**{len(rounds)} rounds**, the schedulers in a rotating order ({orders}), the "
            "bind ceiling measured again in each. Every cell is the median over the rounds "
            "with min and max in brackets; a ratio is computed within each round (against "
            "that round's ceiling or the peer's run of that round). A ratio to a peer is "
            'claimed only where the two ranges do not overlap: otherwise it says "ranges '
            'overlap", and the two are not told apart by this run.',
        ]
    lines.append("")
    lines += table(
        ["scheduler", "version", "settings"],
        (
            [
                peer["label"],
                peer["version"],
                ", ".join(f"{k}: {v}" for k, v in peer.items() if k not in {"label", "version"}),
            ]
            for peer in results.schedulers.values()
        ),
    )
    ceilings = [one.ceilings["bind_ceiling"] for one in rounds if "bind_ceiling" in one.ceilings]
    if ceilings:
        rates = _spread([c["pods_per_second"] for c in ceilings])
        lines += [
            "",
            f"Bind ceiling (a trivial client POSTing bindings at concurrency "
            f"{settings['concurrency']}): {ceilings[0]['pods']} pods at {rates} pods/s.",
        ]
    watched = [
        one.ceilings["bind_ceiling_watched"]
        for one in rounds
        if "bind_ceiling_watched" in one.ceilings
    ]
    if watched:
        lines.append(
            "The same with the bench's bind watch running, as every scheduler is timed "
            f'("watched"): {_spread([w["pods_per_second"] for w in watched])} pods/s by its '
            "POSTs, "
            f"{_spread([w['pods_per_second_first_to_last_bind'] for w in watched])} pods/s "
            "first to last bind as the watch saw them."
        )
    if settings.get("audit"):
        lines += [
            "",
            "The window of each run closes twice: at the **last bind**, and at the "
            "scheduler's **last write** of the workload (Events, PodGroup status, pod "
            "conditions: its last create, update, patch or delete in the API server's audit "
            f"log, taken as the last once it wrote nothing for {settings['quiet_seconds']:g} s; "
            f'"not quiet" if it still wrote {settings["quiet_cap_seconds"]:g} s after its last '
            "bind). The last Event is the end every scheduler shares: each posts one per pod "
            "bound. The last write may be later: gang-scheduler keeps PodGroup status (phase, "
            "running members) as KWOK reports pods running, which Coscheduling leaves to "
            "scheduler-plugins' PodGroup controller (not run here) and kube-scheduler does not "
            "write. CPU and peak RSS are read at each end; API requests are the scheduler's "
            "from its start to its last write, counted by the API server's audit log (every "
            "client but the scheduler under test is known by its user agent). The audit log "
            "is on for the ceiling too.",
        ]
    lines += [
        "",
        "Checked throughout every run, and the run fails naming the scheduler and the gang "
        f"or node: no gang partly bound for more than {PARTIAL_LIMIT_SECONDS:g} s, none at "
        "the end, no node given more than its allocatable (KWOK does not enforce it). "
        '"Longest partly bound" is the longest any gang had some but not all members bound.',
    ]
    to_bind = [
        ("pods/s from start", "pods_per_second"),
        ("pods/s first to last bind", "pods_per_second_first_to_last_bind"),
        ("start to first bind s", "start_to_first_bind_seconds"),
        ("longest partly bound ms", "longest_partly_bound_ms"),
        ("longest event-loop stretch ms", "longest_event_loop_stretch_ms"),
        ("its loop-thread CPU ms", "longest_event_loop_stretch_cpu_ms"),
        ("its process CPU ms", "longest_event_loop_stretch_process_cpu_ms"),
        ("CPU s", "cpu_seconds"),
        ("peak RSS MiB", "peak_rss_mib"),
    ]
    ceiling_columns = [
        ("÷ ceiling, from start", "pods_per_second", "bind_ceiling"),
        ("÷ ceiling, first to last", "pods_per_second_first_to_last_bind", "bind_ceiling"),
        ("÷ watched ceiling, first to last", "pods_per_second_first_to_last_bind",
         "bind_ceiling_watched"),
    ]  # fmt: skip
    to_event = [
        ("s to last Event", "seconds_to_last_event"),
        ("pods/s to last Event", "pods_per_second_to_last_event"),
        ("last Event after last bind s", "last_event_after_last_bind_seconds"),
    ]
    to_write = [
        ("s to last write", "seconds_to_last_write"),
        ("pods/s to last write", "pods_per_second_to_last_write"),
        ("last write after last bind s", "last_write_after_last_bind_seconds"),
        ("CPU s at last write", "cpu_seconds_at_last_write"),
        ("peak RSS MiB at last write", "peak_rss_mib_at_last_write"),
        ("API requests", "api_requests_total"),
        ("requests per pod", "api_requests_per_pod"),
        ("passes", "passes"),
        ("Events dropped", "events_dropped"),
    ]
    lat = [
        ("gangs whole", "gangs_whole"),
        ("p50 ms", "gang_latency_p50_ms"),
        ("p99 ms", "gang_latency_p99_ms"),
        ("worst ms", "gang_latency_max_ms"),
        ("drain after creation s", "drain_after_creation_seconds"),
        ("longest partly bound ms", "longest_partly_bound_ms"),
        ("longest event-loop stretch ms", "longest_event_loop_stretch_ms"),
        ("its loop-thread CPU ms", "longest_event_loop_stretch_cpu_ms"),
        ("its process CPU ms", "longest_event_loop_stretch_process_cpu_ms"),
        ("CPU s", "cpu_seconds"),
        ("last write after last bind s", "last_write_after_last_bind_seconds"),
        ("CPU s at last write", "cpu_seconds_at_last_write"),
        ("API requests", "api_requests_total"),
        ("passes", "passes"),
    ]
    fight = [
        ("room (gangs)", "room_gangs"),
        ("submitted", "gangs_submitted"),
        ("gangs whole", "gangs_whole"),
        ("gangs partly bound", "gangs_partly_bound"),
        ("s to K-th whole gang", "seconds_to_kth_whole_gang"),
        ("pods sent back", "pods_sent_back"),
        ("CPU s", "cpu_seconds"),
        ("last write after last bind s", "last_write_after_last_bind_seconds"),
        ("API requests", "api_requests_total"),
    ]
    smallest, largest = settings.get("volume_gangs") or (4, 8)
    backlogs = [
        ("backlog_gangs_of_8", "Backlog, gangs of 8 (PodGroups)"),
        ("backlog_single_pods", "Backlog, single pods"),
        ("backlog_mixed_gangs", f"Backlog, gangs of 1 to {settings.get('largest_gang', 64)}"),
        ("backlog_volumes", f"Backlog with volumes, gangs of {smallest} to {largest} (kube-"
         "scheduler: single pods), a WaitForFirstConsumer claim a pod"),
    ]  # fmt: skip
    for key, title in backlogs:
        rows = _table(results, key, columns=to_bind, figure="pods_per_second", higher=True,
                      ceiling=ceiling_columns)  # fmt: skip
        if not rows:
            continue
        lines += ["", f"## {title}", "", "To the last bind:", "", *rows]
        rows = _table(
            results, key, columns=to_event, figure="pods_per_second_to_last_event", higher=True
        )
        lines += ["", "To the last Event (one per pod bound, written by every scheduler):", ""]
        lines += rows
        rows = _table(
            results, key, columns=to_write, figure="pods_per_second_to_last_write", higher=True
        )
        lines += ["", "To the last write of any kind (ratios: pods/s to last write):", "", *rows]
        if requests := _requests_table(results, key):
            lines += ["", "API requests from start to last write, by verb and resource:", ""]
            lines += requests
        if key == "backlog_volumes":
            lines += _volumes_section(results, key)
    others = [
        ("latency_gangs_of_8", "Latency, gangs of 8 at a steady creation rate", lat,
         "gang_latency_p99_ms", False),
        ("latency_mixed_gangs", f"Latency, gangs of 1 to {settings.get('largest_gang', 64)} at "
         "a steady creation rate", lat, "gang_latency_p99_ms", False),
        ("contention_in_order", "Contention, gang after gang", fight,
         "seconds_to_kth_whole_gang", False),
        ("contention_shuffled", "Contention, pods shuffled", fight,
         "seconds_to_kth_whole_gang", False),
    ]  # fmt: skip
    for key, title, columns, figure, higher in others:
        rows = _table(results, key, columns=columns, figure=figure, higher=higher)
        if rows:
            lines += ["", f"## {title}", "", *rows]
    if any(k.startswith("contention") for one in rounds for k in one.workloads):
        lines += [
            "",
            "Contention: every pod asks for a whole node's GPUs, so the cluster has room for "
            "K = nodes // 8 gangs of 8; 2K gangs are submitted while the scheduler runs. "
            "Seconds to the K-th whole gang count from the first PodGroup's submission. Gangs "
            "partly bound hold part of the cluster without running. Pods sent back: pods "
            "rejected after waiting at Permit with a node held for them (kube-scheduler's "
            "FailedScheduling events: Permit timeout, Coscheduling's rejection in PostFilter "
            "or Unreserve); gang-scheduler has no Permit stage and binds a gang only once "
            "every member has a node.",
        ]
    return "\n".join(lines) + "\n"


async def main_async(
    args: argparse.Namespace,
    *,
    directory: Path = BENCH_DIR,
    progress: Callable[[Results], None] | None = None,
) -> Results:
    # --skew: an API server and controller-manager of Coscheduling's own release, without
    # the Workload API (v1.36) they do not have.
    # The controller-manager's client held to the schedulers' QPS and burst: the backlog
    # with volumes waits on its PV controller (at its default 20 QPS, a few claims a second).
    plane = local_cluster.up(
        directory,
        audit_policy=audit.POLICY,
        bin_dir=skewed_control_plane() if args.skew else None,
        workload_api=not args.skew,
        controller_client=(args.qps, args.burst),
    )
    try:
        limits = ClientLimits(qps=args.qps, burst=args.burst, bind_concurrency=args.concurrency)
        peers = contenders(
            kubeconfig=plane.kubeconfig,
            workdir=directory / "schedulers",
            limits=limits,
            build=not args.smoke,
            only=frozenset(args.only) if args.only else None,
        )
        if args.pprof is not None:
            peers = [p.profiled(local_cluster.free_port()) for p in peers]
        racks = max(args.nodes // 50, 1)
        plan = layout(racks=racks, nodes_per_rack=args.nodes // racks, prefix="bench-node-")
        manifests = [
            node_manifest(n, cpu="64", memory="256Gi", gpu=GPUS_PER_NODE) for n in plan.nodes
        ]
        create_nodes(api_client(plane.kubeconfig), manifests, workers=16)
        wait_ready(api_client(plane.kubeconfig), len(manifests))
        api = ApiClient(
            load_credentials(str(plane.kubeconfig)),
            connections=args.concurrency + 8,
            user_agent=audit.BENCH_USER_AGENT,
        )
        setting = Setting(
            api=api,
            nodes=tuple(n.name for n in plan.nodes),
            logs=plane.logs,
            concurrency=args.concurrency,
            timeout=args.timeout,
            contention_timeout=args.contention_timeout,
            allocatable={m["metadata"]["name"]: allocatable_of(m) for m in manifests},
            audit_log=plane.logs / "audit.log",
            quiet=args.quiet,
            quiet_cap=args.quiet_cap,
            pprof=args.pprof,
        )
        try:
            served = await api.request("GET", "/version")
            settings = {
                "machine": f"{os.cpu_count()} cores",
                "control_plane": served.get("gitVersion", "?"),
                "nodes": len(setting.nodes),
                "concurrency": args.concurrency,
                "client": {"qps": args.qps, "burst": args.burst},
                "contention_timeout_seconds": args.contention_timeout,
                "audit": True,
                "quiet_seconds": args.quiet,
                "quiet_cap_seconds": args.quiet_cap,
                "largest_gang": args.largest_gang,
            }
            if runs_volumes(args):
                settings["volume_pods"] = args.volume_pods
                settings["volume_gangs"] = list(args.volume_gangs)
            results = Results(settings, schedulers={p.key: p.describe() for p in peers})
            run = scale_workloads if args.scale else workloads
            for number in range(args.rounds):
                turn = number % len(peers)
                order = peers[turn:] + peers[:turn]
                ceilings = {}
                log(f"round {number + 1} of {args.rounds}: {', '.join(p.label for p in order)}")
                if not (args.smoke or args.no_ceiling):
                    log("bind ceiling")
                    try:
                        ceilings["bind_ceiling"] = await bind_ceiling(setting, pods=args.pods)
                    except (TimeoutError, ApiError) as error:
                        log(f"no bind ceiling this round: {type(error).__name__}: {error}")
                    log("bind ceiling, watched")
                    if (watched := await watched_ceiling(setting, pods=args.pods)) is not None:
                        ceilings["bind_ceiling_watched"] = watched
                runs = await run(setting, order, args)
                one = Round(
                    order=tuple(p.key for p in order),
                    ceilings=ceilings,
                    workloads={
                        w: {k: Run(figures) for k, figures in by.items()} for w, by in runs.items()
                    },
                )
                results = results.with_round(one)
                if progress is not None:
                    progress(results)  # a later round's failure loses none of this one
        finally:
            await api.close()
        return results
    finally:
        local_cluster.down(directory)


SCHEDULERS = list(BUILDERS)
# What a run without --only runs (an earlier checkout of ours only when asked for).
DEFAULT_SCHEDULERS = [key for key in SCHEDULERS if key not in ASKED_FOR]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, help="KWOK nodes (default: 1000; 5000 with --scale)")
    p.add_argument("--pods", type=int, help="pods per backlog (default: 5000; 30000 --scale)")
    p.add_argument(
        "--concurrency",
        type=int,
        default=32,
        help="our bind concurrency, the "
        "ceiling's and the bench's requests in flight (default: %(default)s)",
    )
    p.add_argument(
        "--qps",
        type=float,
        default=5000,
        help="every scheduler's client QPS "
        "(default: %(default)s, as kube-scheduler's own scheduler_perf)",
    )
    p.add_argument("--burst", type=int, default=5000, help="and burst (default: %(default)s)")
    p.add_argument("--latency-pods", type=int, default=2000, help="pods of the latency phase")
    p.add_argument(
        "--volume-pods",
        type=int,
        help=f"pods of the backlog with volumes, a claim each (default: {VOLUME_PODS}, or "
        "--pods if fewer)",
    )
    p.add_argument(
        "--volume-gangs",
        type=gang_sizes,
        default=VOLUME_GANGS,
        metavar="SMALLEST-LARGEST",
        help="sizes of its gangs, drawn with --seed (default: {}-{})".format(*VOLUME_GANGS),
    )
    p.add_argument(
        "--latency-rate",
        type=float,
        default=200,
        help="pods created per second in the latency phase: a load the API server sustains, "
        "so that the figure is the scheduler's and not a queue in front of the API server",
    )
    p.add_argument(
        "--settle",
        type=float,
        default=3.0,
        help="seconds the contention phase "
        "watches after the K-th whole gang (default: %(default)s)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=600,
        help="longest wait of a workload, per scheduler (default: %(default)s)",
    )
    p.add_argument(
        "--contention-timeout",
        type=float,
        default=120,
        help="how long contention waits for the K-th whole gang; a scheduler that has not "
        "got there is reported as such (default: %(default)s)",
    )
    p.add_argument("--seed", type=int, default=1, help="shuffles and mixed gang sizes")
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of every workload, the schedulers in a rotating order and the ceiling "
        "measured in each; figures are medians with min and max (default: %(default)s)",
    )
    p.add_argument(
        "--quiet",
        type=float,
        default=5.0,
        help="seconds a scheduler must write nothing after its last bind for its last write "
        "to be taken as its last (default: %(default)s)",
    )
    p.add_argument(
        "--quiet-cap",
        type=float,
        default=30.0,
        help="how long after its last bind a scheduler may go on writing before it is "
        'reported as "still writing" (default: %(default)s)',
    )
    p.add_argument(
        "--scale",
        action="store_true",
        help="the scale tier (long): 5,000 nodes, 30,000 pods in gangs of 1 to 64",
    )
    p.add_argument(
        "--scale-xl",
        action="store_true",
        help="the bigger tier (longer): 10,000 nodes, 60,000 pods in gangs of 1 to 256",
    )
    p.add_argument(
        "--only",
        action="append",
        choices=SCHEDULERS,
        help="run only these schedulers (repeatable)",
    )
    p.add_argument(
        "--workload",
        action="append",
        choices=[
            "backlog_gangs_of_8", "backlog_single_pods", "latency_gangs_of_8",
            "contention_in_order", "contention_shuffled", "backlog_volumes",
            "backlog_mixed_gangs", "latency_mixed_gangs",
        ],
        help="run only these workloads (repeatable; the mixed ones are the scale tiers')",
    )  # fmt: skip
    p.add_argument(
        "--skew",
        action="store_true",
        help="Coscheduling (and tuned) against kube-apiserver and kube-controller-manager of "
        "its own release (v1.34), built by bench/peers/coscheduling/build.sh --control-plane; "
        "results get -skew in their name",
    )
    p.add_argument(
        "--no-ceiling",
        action="store_true",
        help="measure no bind ceiling (no ratio to it is then reported): at 10,000 nodes its "
        "two runs take 20 minutes a round",
    )
    p.add_argument(
        "--pprof",
        type=Path,
        metavar="DIR",
        help="kube-scheduler peers serve pprof, and a CPU profile of 30 s is taken into DIR "
        "every 60 s of each backlog, their goroutines at its end (bench/pprof.py; read them "
        "with `go tool pprof -top FILE`)",
    )
    p.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    return p


# The backlog with volumes at the standard tier (1,000 nodes): pods, gang sizes.
VOLUME_PODS = 3000
VOLUME_GANGS = (4, 8)

# Each tier: its results' name, nodes, pods and largest gang.
TIERS = {
    "standard": ("gang-scheduling", 1000, 5000, 8),
    "scale": ("gang-scheduling-scale", 5000, 30000, 64),
    "scale_xl": ("gang-scheduling-xl", 10000, 60000, 256),
}


def _tier(args: argparse.Namespace) -> tuple[str, int, int, int]:
    return TIERS["scale_xl" if args.scale_xl else "scale" if args.scale else "standard"]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    args = parser().parse_args(argv)
    _, nodes, pods, largest = _tier(args)
    args.scale = args.scale or args.scale_xl
    args.nodes = args.nodes or nodes
    args.pods = args.pods or pods
    args.largest_gang = largest
    args.volume_pods = args.volume_pods or min(VOLUME_PODS, args.pods)
    if args.skew:
        # kube-scheduler v1.36's gang scheduling needs the v1.36 Workload API.
        if args.only and "kube_scheduler" in args.only:
            parser().error("--skew runs an older control plane: kube_scheduler cannot run on it")
        args.only = args.only or ["coscheduling", "coscheduling_tuned"]
    return args


def runs_volumes(args: argparse.Namespace) -> bool:
    """Whether the run has the backlog with volumes (the standard tier's, not the smoke's)."""
    return not (args.scale or args.smoke) and (
        not args.workload or "backlog_volumes" in args.workload
    )


def results_name(args: argparse.Namespace) -> str:
    """``gang-scheduling`` at the tier's own size; another size gets a file of its own
    (``gang-scheduling-100-nodes``), and so does a run of some workloads only
    (``gang-scheduling-xl-5000-nodes-latency-mixed-gangs``), or at another creation rate than
    the default (``...-at-100-pods-per-second``), or of some schedulers only
    (``...-only-coscheduling-gang-scheduler``), so a quick or partial run never overwrites
    the tier's figures. The cost curve runs its backlog and latency steps so, each on a
    control plane of its own: the latency step then does not wait for the backlog's pods to
    be deleted (over 13 minutes at 5,000 nodes on this machine). So does the bigger tier's
    run of each peer (``bench.beside`` puts them in one table). The skew check's file is
    its own whichever schedulers it runs."""
    name, nodes, _, _ = _tier(args)
    if args.nodes != nodes:
        name += f"-{args.nodes}-nodes"
    if args.workload:
        name += "".join(f"-{w.replace('_', '-')}" for w in sorted(set(args.workload)))
    if args.latency_rate != parser().get_default("latency_rate"):
        name += f"-at-{args.latency_rate:g}-pods-per-second"
    if runs_volumes(args) and (
        args.volume_pods != min(VOLUME_PODS, args.pods) or args.volume_gangs != VOLUME_GANGS
    ):
        smallest, largest = args.volume_gangs
        name += f"-volumes-{args.volume_pods}-pods-in-gangs-of-{smallest}-to-{largest}"
    if args.skew:
        return name + "-skew"
    if args.only and set(args.only) != set(DEFAULT_SCHEDULERS):
        name += "-only" + "".join(f"-{s.replace('_', '-')}" for s in sorted(set(args.only)))
    return name


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    name = results_name(args)
    try:
        results = asyncio.run(
            main_async(args, progress=lambda r: write(name, r.to_json(), markdown(r), quiet=True))
        )
    except (local_cluster.ClusterError, ApiError, TimeoutError) as error:
        traceback.print_exc()
        print(f"bench failed: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    write(name, results.to_json(), markdown(results), quiet=False)
    failed = [
        f"round {n}: {w}/{k}"
        for n, one in enumerate(results.rounds, start=1)
        for w, runs in one.workloads.items()
        for k, r in runs.items()
        if r.failed
    ]
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
