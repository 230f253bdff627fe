"""``gang-scheduler simulate``: a snapshot and a trace, played through the pure core.

No API server: the cluster of a snapshot file (``shell.snapshotting``) is folded into a
``ClusterCache`` as the informers would fill it, and a pass runs every ``step`` seconds of
virtual time exactly as the scheduler's loop runs it (``cache.snapshot(now=...)``, the core's
``schedule``, its memory and queue usage fed back). What the API server and the job's
controller would do is done at once: a binding starts the gang's pods, which end
``duration`` seconds later; an evicted gang of the trace is deleted and submitted again from
the start; a gang that times out is dropped. The snapshot's own pods
never end (their remaining run time is unknown); an evicted one is gone.

Measured as each pass leaves the cluster (its binds, evictions and timeouts applied: what
holds until the next pass): GPU and CPU utilisation, fragmentation
(``core.fragmentation.measure``), each queue's share of the GPUs against its ideal (the
water-filled fair share of what the queues want then, as ``bench/fairness.py`` computes
it); and each gang's wait from its arrival (its pods' creation; after an eviction, the
eviction) to bind, pods preempted and reclaimed. Deterministic: the same inputs give the
same run.
"""

from __future__ import annotations

import calendar
import copy
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from scheduler.cache.cluster import QUEUES
from scheduler.codecs.objects import pod_from_dict
from scheduler.core.forecasting import forecast
from scheduler.core.fragmentation import measure
from scheduler.core.queues import QueueBook
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.decisions import Result
from scheduler.model.forecasts import EtaState, Forecast
from scheduler.model.gangs import queue_of_pod
from scheduler.model.pods import Pod
from scheduler.model.queues import DEFAULT_QUEUE, QUEUE_API
from scheduler.model.resources import CPU, GPU, Resources
from scheduler.model.snapshot import Snapshot
from scheduler.shell.snapshotting import fold
from scheduler.sim.traces import Job, pod_bodies

# A gang waits as long as it takes unless a setup says otherwise: a timeout would end the
# measure of the waits it is about.
SIM_CONFIG = Config(default_timeout_seconds=1e9)


@dataclass(frozen=True)
class Setup:
    """One configuration to play: the core's settings, queue overrides, topology on/off."""

    name: str = "default"
    config: Config = SIM_CONFIG
    queues: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # name -> spec
    topology: bool = True


def load_setup(path: str | Path) -> Setup:
    """A setup file (YAML or JSON): Config fields by name (``scoring``,
    ``starvation_seconds``, ``fair_share_half_life_seconds``, ...), ``queues`` (name -> Queue
    spec fields to set, e.g. ``{weight: 2}``), ``topology`` (false: the topology ConfigMaps
    and --topology-from-labels are left out), ``name`` (the column's title)."""
    import yaml  # noqa: PLC0415

    raw = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a mapping of settings please")
    known = {f.name for f in fields(Config)}
    settings = {k: v for k, v in raw.items() if k in known}
    unknown = set(raw) - known - {"name", "queues", "topology"}
    if unknown:
        raise ValueError(f"{path}: unknown setting(s) {sorted(unknown)}; known: {sorted(known)}")
    if "topology_labels" in settings:
        settings["topology_labels"] = tuple(
            tuple(pair) for pair in (settings["topology_labels"] or ())
        )
    if "aliases" in settings:
        settings["aliases"] = tuple(settings["aliases"])
    return Setup(
        name=str(raw.get("name") or Path(path).stem),
        config=replace(SIM_CONFIG, **settings),
        queues=dict(raw.get("queues") or {}),
        topology=bool(raw.get("topology", True)),
    )


def size_bucket(gpus: int) -> str:
    """Gangs by their GPUs in all."""
    for top, label in ((0, "0 GPU"), (1, "1 GPU"), (4, "2-4 GPUs"), (8, "5-8 GPUs")):
        if gpus <= top:
            return label
    return "9-32 GPUs" if gpus <= 32 else "33+ GPUs"


BUCKETS = ("0 GPU", "1 GPU", "2-4 GPUs", "5-8 GPUs", "9-32 GPUs", "33+ GPUs")


@dataclass
class Run:
    """What happened in one play, sampled at each pass (``times``, seconds from the start)."""

    setup: str
    times: list[float] = field(default_factory=list)
    gpu_util: list[float] = field(default_factory=list)
    cpu_util: list[float] = field(default_factory=list)
    stranded_gpus: list[int] = field(default_factory=list)
    whole_gpu_nodes: list[int] = field(default_factory=list)
    waiting_members: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)  # cumulative pods, per sample
    reclaimed: list[int] = field(default_factory=list)
    shares: dict[str, list[float]] = field(default_factory=dict)  # queue -> per sample
    ideal: dict[str, list[float]] = field(default_factory=dict)
    # (job name, queue, size bucket, wait in seconds) per incarnation that started
    waits: list[tuple[str, str, str, float]] = field(default_factory=list)
    jobs: int = 0
    finished: int = 0
    timed_out: int = 0
    still_waiting: int = 0
    still_running: int = 0
    passes: int = 0
    seconds: float = 0.0
    total_gpus: int = 0
    nodes: int = 0
    # Wall-clock seconds of the whole play: said on the console only, never in the report.
    wall_seconds: float = 0.0
    # With --forecast-every: per gang that started, the first forecast made while it waited:
    # (job name, size bucket, seconds from that forecast to the predicted start, to the
    # actual start); and the forecasts made.
    etas: list[tuple[str, str, float, float]] = field(default_factory=list)
    forecasts: int = 0


@dataclass(frozen=True)
class Played:
    """One pass, for a caller that measures more than ``Run`` holds (``observe``): taken
    once the pass's binds are applied and before its evictions are, as its victims still
    hold their room (they take a moment to go, and what they free is the next pass's)."""

    t: float  # seconds from the start
    result: Result
    # By uid: the snapshot's and the trace's, binds applied. The play's own, which it goes
    # on changing: read it in the call.
    pods: Mapping[str, Pod]
    job_of: Mapping[str, Job]  # gang name -> the job it is an incarnation of
    seconds: float  # wall-clock seconds the core took: said, never part of ``Run``
    # The forward play the pass read (``forecast_every``; None before the first), and the
    # epoch of the play's 0, to read its estimates in seconds from the start.
    forecast: Forecast | None = None
    t0: float = 0.0


def prepare(document: Mapping[str, Any], jobs: Sequence[Job], setup: Setup) -> dict[str, Any]:
    """The snapshot as this setup plays it: topology left out when off, the trace's queues
    created when missing (weight 1), the setup's queue overrides applied."""
    doc: dict[str, Any] = copy.deepcopy(dict(document))
    lists = doc.setdefault("lists", {})
    if not setup.topology:
        lists["topologies"] = []
    wanted = {job.queue for job in jobs if job.queue} | set(setup.queues)
    if wanted:
        queues = lists.setdefault(QUEUES, [])
        have = {q.get("metadata", {}).get("name") for q in queues}
        for name in sorted(wanted - have):
            queues.append(
                {
                    "apiVersion": QUEUE_API,
                    "kind": "Queue",
                    "metadata": {"name": name, "uid": f"sim-queue-{name}"},
                    "spec": {"weight": 1},
                }
            )
        for queue in queues:
            override = setup.queues.get(queue.get("metadata", {}).get("name"))
            if override:
                queue["spec"] = {**queue.get("spec", {}), **override}
        doc["unserved"] = [k for k in doc.get("unserved", []) if k != QUEUES]
    return doc


def retry_name(name: str, attempt: int, *, taken: set[str]) -> str:
    """The gang a job submits again after its ``attempt``-th incarnation was evicted: none of
    the trace's names ("a-r1" could be a job) nor an earlier retry's, added to
    ``taken``. ``bench/simcheck.py`` names the real run's retries by it too."""
    gang = f"{name}-r{attempt}"
    while gang in taken:
        gang += "-r"
    taken.add(gang)
    return gang


def _stamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _start_time(document: Mapping[str, Any]) -> float:
    taken = document.get("metadata", {}).get("takenAt")
    try:  # UTC whatever the machine's time zone (else an hour off in summer time)
        return float(calendar.timegm(time.strptime(taken, "%Y-%m-%dT%H:%M:%SZ")))
    except (TypeError, ValueError):
        return 0.0


def simulate(  # noqa: PLR0915 (one loop, as the scheduler's)
    document: Mapping[str, Any],
    jobs: Sequence[Job],
    *,
    setup: Setup = Setup(),
    step: float = 5.0,
    until: float | None = None,
    reaction: float = 0.0,
    observe: Callable[[Played], None] | None = None,
    forecast_every: float = 0.0,
    forecast_resolution: float = 60.0,
) -> Run:
    """Play ``jobs`` on the snapshot ``document``; ``until``: stop then (seconds from the
    start), else once every job of the trace has arrived and none runs. ``reaction``: how
    long after a job arrives or a pod ends the scheduler can act on it (its watch, its
    pass): a pass sees them from then on, and a pod's room is held until then. 0: at once,
    even by a pass at the very instant; the real scheduler on a local control plane takes
    some 0.03 s (``bench/simcheck.py``), which matters only at steps of that order.
    ``observe``: called with each pass (``Played``). ``forecast_every``: every that many
    seconds of virtual time, a forward play (``core.forecasting``) from the pass's snapshot,
    every job's duration known to it (its pods declare it); each gang's first estimate is
    compared with when it started (``Run.etas``). 0: none, and the play is as without.
    ``forecast_resolution``: the plays' clock step (durations of seconds want one of a
    second)."""
    if not (math.isfinite(step) and step > 0):
        raise ValueError(f"--step must be a positive number of seconds, got {step!r}")
    if not (math.isfinite(reaction) and reaction >= 0):
        raise ValueError(f"--reaction must be 0 or more seconds, got {reaction!r}")
    for job in jobs:  # a NaN or infinite time never comes: the play would never end
        if not (math.isfinite(job.at) and math.isfinite(job.duration) and job.duration > 0):
            raise ValueError(f"job {job.name}: at and duration must be finite, duration > 0")
    started_wall = time.perf_counter()
    config = setup.config if setup.topology else replace(setup.config, topology_labels=())
    doc = prepare(document, jobs, setup)
    cache = fold(doc, config=config)
    t0 = _start_time(doc)
    run = Run(setup=setup.name, jobs=len(jobs))
    pods: dict[str, Pod] = {}  # by uid, every pod of the snapshot's and the trace's
    for body in doc.get("lists", {}).get("pods", []):
        pod = pod_from_dict(body)
        pods[pod.ref.uid] = pod
    job_of: dict[str, Job] = {}  # gang name -> its job
    members: dict[str, list[str]] = {}  # gang name -> pod uids
    attempts: dict[str, int] = {}
    submitted: dict[str, float] = {}
    ends: dict[str, float] = {}  # gang name -> when its end is seen (its room freed)
    arrivals = sorted(jobs, key=lambda j: (j.at, j.name))
    next_arrival = 0
    preempted = reclaimed = 0
    horizon = until if until is not None else float("inf")

    taken = {job.name for job in jobs}

    def submit(job: Job, at: float) -> None:
        attempt = attempts.get(job.name, 0)
        attempts[job.name] = attempt + 1
        gang = retry_name(job.name, attempt, taken=taken) if attempt else job.name
        bodies = pod_bodies(
            job, gang=gang, created=_stamp(t0 + at), scheduler=config.scheduler_name
        )
        if forecast_every:  # what the play is told of each run: its real duration
            for body in bodies:
                notes = body["metadata"].setdefault("annotations", {})
                notes[names.EXPECTED_DURATION] = f"{job.duration:g}s"
        members[gang] = []
        for body in bodies:
            pod = pod_from_dict(body)
            pods[pod.ref.uid] = pod
            members[gang].append(pod.ref.uid)
            cache.upsert_pod(pod)
        job_of[gang] = job
        submitted[gang] = at

    # Room taken (+) or freed (-) on each node by the pass, since its snapshot: the cache's
    # room is as of the snapshot, and the samples are taken as the pass leaves the cluster.
    moved: dict[str, Resources] = {}

    def hold(pod: Pod, sign: int) -> None:
        if pod.holds_resources:
            was = moved.get(pod.node_name, Resources())
            moved[pod.node_name] = was + pod.requests if sign > 0 else was - pod.requests

    def remove(uid: str) -> None:
        pod = pods.pop(uid, None)
        if pod is not None:
            hold(pod, -1)
        cache.remove_pod(uid)

    def drop(gang: str) -> None:
        for uid in members.pop(gang, []):
            remove(uid)
        ends.pop(gang, None)

    predicted: dict[str, tuple[float, float]] = {}  # gang -> (forecast at, predicted start)
    next_forecast = 0.0
    t = changed_at = 0.0
    while t <= horizon:
        now = t0 + t
        ended = sorted(g for g, end in ends.items() if end <= t)
        for gang in ended:
            drop(gang)
            run.finished += 1
        arrivals_before = next_arrival
        while next_arrival < len(arrivals) and arrivals[next_arrival].at + reaction <= t:
            # Its pods exist from its arrival: its wait counts from then, not from this pass
            # (which comes up to a step later; the real scheduler acts on their creation).
            job = arrivals[next_arrival]
            submit(job, job.at)
            next_arrival += 1
        arrived = next_arrival > arrivals_before
        snap = cache.snapshot(now=now)
        if forecast_every and t >= next_forecast:
            next_forecast = t + forecast_every
            _forecast(
                snap, cache, config=config, now=now, t0=t0, into=predicted,
                resolution=forecast_resolution,
            )  # fmt: skip
            run.forecasts += 1
        moved.clear()
        started = time.perf_counter()
        result = schedule(snap, now=now, config=config)
        took = time.perf_counter() - started
        run.passes += 1
        cache.remember(dict(result.memory))
        cache.queue_usage = result.queue_usage
        for group in result.bindings:
            for placed in group.gangs:
                for binding in placed.bindings:
                    pod = pods.get(binding.pod.uid)
                    if pod is None:
                        continue
                    bound = replace(
                        pod,
                        node_name=binding.node,
                        phase="Running",
                        bound_by=config.scheduler_name,
                        started=now if forecast_every else pod.started,
                    )
                    pods[binding.pod.uid] = bound
                    hold(bound, +1)
                    cache.upsert_pod(bound)
                gang = placed.gang.name
                job = job_of.get(gang)
                if job is not None and gang not in ends and placed.gang.namespace == job.namespace:
                    ends[gang] = round(t + job.duration + reaction, 9)  # as t is
                    run.waits.append(
                        (job.name, job.queue or DEFAULT_QUEUE, size_bucket(job.gpus),
                         t - submitted[gang])
                    )  # fmt: skip
                    if gang in predicted:
                        made, start = predicted.pop(gang)
                        run.etas.append((job.name, size_bucket(job.gpus), start - made, t - made))
        if observe is not None:
            played = Played(
                t=t, result=result, pods=pods, job_of=job_of, seconds=took,
                forecast=snap.forecast, t0=t0,
            )  # fmt: skip
            observe(played)
        evicted_gangs: set[str] = set()
        for eviction in result.evictions:
            pod = pods.get(eviction.pod.uid)
            if pod is None:
                continue
            if eviction.reclaimed_from:
                reclaimed += 1
            else:
                preempted += 1
            gang = pod.gang.key.name if pod.gang is not None else ""
            if gang in job_of and gang in members:
                evicted_gangs.add(gang)
            else:  # the snapshot's own: gone
                remove(eviction.pod.uid)
        for gang in sorted(evicted_gangs):
            drop(gang)
            submit(job_of[gang], t)  # its job submits it again, from the start
        for key, state in result.memory.items():
            if state.timed_out and key.name in members and key.name not in ends:
                drop(key.name)
                run.timed_out += 1
        # Sampled as the pass leaves the cluster: that holds until the next pass. Sampled
        # before the pass, a gang bound by it counted nothing until the next one, which with
        # nothing waiting may be far off (a lone gang of 100 s counted as idle throughout).
        _sample(run, cache, snap, pods, moved=moved, t=t, ours=config.scheduler_names)
        run.preempted.append(preempted)
        run.reclaimed.append(reclaimed)
        if result.bindings or result.evictions or ended or arrived:
            changed_at = t
        # Without --until, the play ends once no job is left to arrive or run and what still
        # waits has been tried since the last change: it would then wait for ever (nothing
        # of the trace is left to free room). Not at once when the last job ends: a gang
        # in its backoff then has not yet tried the room that end freed, and a play ended
        # there would leave it waiting in an empty cluster. Within the longest backoff
        # every waiting gang has tried it (a node changed since it was parked: it is tried).
        if (
            until is None
            and next_arrival >= len(arrivals)
            and not ends
            and (not cache.waiting or t - changed_at > config.max_backoff_seconds)
        ):
            break
        t = _next_time(
            t, step, cache=cache, ends=ends, arrivals=arrivals, next_arrival=next_arrival,
            reaction=reaction,
        )  # fmt: skip
    run.still_running = len(ends)
    run.still_waiting = sum(1 for g in members if g not in ends)
    run.seconds = t
    run.wall_seconds = time.perf_counter() - started_wall
    return run


def _forecast(
    snap: Snapshot,
    cache: Any,
    *,
    config: Config,
    now: float,
    t0: float,
    into: dict[str, tuple[float, float]],
    resolution: float,
) -> None:
    """A forward play from the pass's snapshot with every pod of ours (the parked gangs' too,
    read from the cache without a second snapshot, which would change what the next pass
    sees): the first estimate of each gang that has none yet, in seconds from the start. The
    cache keeps the forecast for the passes after it, as the live forecaster's."""
    view = replace(snap, pods=cache.ours())
    found = forecast(view, now=now, config=config, resolution=resolution)
    cache.keep_forecast(found)  # as the live forecaster does: the reserve action reads it
    for key, eta in found.etas.items():  # one that fits now is no forecast: it just binds
        if key.name not in into and eta.state is EtaState.ESTIMATED and eta.p50 is not None:
            into[key.name] = (now - t0, eta.p50 - t0)


def _next_time(
    t: float,
    step: float,
    *,
    cache: Any,
    ends: Mapping[str, float],
    arrivals: Sequence[Job],
    next_arrival: int,
    reaction: float = 0.0,
) -> float:
    """The next pass: ``step`` later, or, with nothing of ours waiting, the first step at or
    after the next arrival or end (nothing changes before then: those passes are skipped)."""
    # Rounded: steps of 0.1 added up drift (286.69999...), and an end at a whole tenth
    # could wait a step longer than it should.
    if cache.waiting:
        return round(t + step, 9)
    upcoming = [*ends.values()]
    if next_arrival < len(arrivals):
        upcoming.append(arrivals[next_arrival].at + reaction)
    if not upcoming:
        return round(t + step, 9)
    target = min(upcoming)
    # The first step at or after it, at least one; rounded first: 5.9 / 0.1 is 58.999...
    # (59 steps), and -(-5.9 // 0.1) made it 60.
    steps = max(1, math.ceil(round((target - t) / step, 6)))
    return round(t + steps * step, 9)


def _sample(
    run: Run,
    cache: Any,
    snap: Any,
    pods: Mapping[str, Pod],
    *,
    moved: Mapping[str, Resources],
    t: float,
    ours: frozenset[str],
) -> None:
    # The cache's room is as of the pass's snapshot; what the pass bound or evicted since
    # is ``moved`` (the waiting members are the cache's, up to date).
    free, allocatable, waiting = cache.room()
    free = {n: room - moved[n] if n in moved else room for n, room in free.items()}
    total = {r: sum(a.get(r, 0) for a in allocatable.values()) for r in (GPU, CPU)}
    used = {
        r: sum(max(allocatable[n].get(r, 0) - free[n].get(r, 0), 0) for n in allocatable)
        for r in (GPU, CPU)
    }
    run.nodes = len(allocatable)
    run.total_gpus = total[GPU]
    run.times.append(t)
    run.gpu_util.append(used[GPU] / total[GPU] if total[GPU] else 0.0)
    run.cpu_util.append(used[CPU] / total[CPU] if total[CPU] else 0.0)
    found = measure(free, allocatable=allocatable, waiting=waiting)
    run.stranded_gpus.append(found.stranded.get(GPU, 0))
    run.whole_gpu_nodes.append(found.whole_gpu_nodes)
    run.waiting_members.append(found.waiting)
    tree = cache.queues
    if not tree:
        return
    held: dict[str, dict[str, int]] = {}
    wanting: dict[str, dict[str, int]] = {}
    for pod in pods.values():
        if not pod.alive or pod.scheduler_name not in ours:
            continue
        queue = queue_of_pod(pod, snap.podgroups) or DEFAULT_QUEUE
        into = held if pod.bound else wanting
        for resource, amount in pod.requests.items():
            into.setdefault(queue, {})[resource] = into.get(queue, {}).get(resource, 0) + amount
    book = QueueBook(tree, usage=held, total=cache.allocatable_total(), waiting=wanting)
    leaves = sorted(
        name for name in book.queues if not any(q.parent == name for q in book.queues.values())
    )
    for leaf in leaves:
        share = held.get(leaf, {}).get(GPU, 0) / total[GPU] if total[GPU] else 0.0
        fair = book.fair.get(leaf, {}).get(GPU, 0.0) / total[GPU] if total[GPU] else 0.0
        series = run.shares.setdefault(leaf, [0.0] * (len(run.times) - 1))
        series.append(share)
        run.ideal.setdefault(leaf, [0.0] * (len(run.times) - 1)).append(fair)
