"""``make chaos``: random faults against gang-scheduler on the local control plane, and an
invariant checker that watches the API server throughout.

One control plane (in ``.cluster-chaos/``) serves every run. A run, seeded and reproducible
from its seed (``python -m bench.chaos --runs 1 --seed S``; the plan is the seed's, the
timing is the machine's):

1. **A fresh namespace, fresh KWOK nodes** (8 CPU, 32 GiB each; the workload selects them),
   one *rival* node (the rival binds there) and one *canary* node (canary gangs go there).
2. **Schedulers**: one (``single``) or two replicas with leader election (``ha``: Lease in the
   run's namespace, a short lease), with a scheduler name of the run's own. A replica that
   exits is started again at once, as a Deployment would.
3. **A random workload in waves**: PodGroup gangs (the PodGroup sometimes created after its
   pods), Koordinator-annotated gangs (Strict and NonStrict, sometimes total-number,
   sometimes more members than min-available), GangGroups (2 or 3 gangs naming each other),
   single pods, and batch/v1 Jobs whose pod template carries the gang label or annotations.
   Gangs of 1 to 32 members. The workload fits by construction: its requests are at most
   60% of the capacity left after the most nodes the run may delete.
4. **Random faults at random moments**, half of them right after a wave (while it binds):
   the scheduler SIGKILLed (started again at once); the leader SIGKILLed or frozen (SIGSTOP,
   SIGCONT seconds later, past its lease); kube-apiserver SIGKILLed and started again; etcd
   restarted (SIGTERM or SIGKILL); a rival client binding some of our pending pods to the
   rival node (POST pods/binding, as ``e2e.objects.bind``); workload nodes deleted (their pods
   then force-deleted, as the pod GC controller would: the control plane runs none); pods
   deleted. After each fault a canary gang (2 pods) is created.
5. **Quiescence**: after the last fault, until every gang that should be bound is, every
   canary is bound and no bind happened for a few seconds, within ``RECOVERY_SECONDS``
   (60 s; 30 s for the small workloads of the short version in ``make test``). The run's
   *recovery* is the last fault's end to every gang bound; its *scheduler's part* counts
   each gang only from when its last member and claims existed and it had room
   (``SchedulerWait``): a controller that makes pods or claims late adds to the first only.

The checker follows the namespace's pods with a LIST+WATCH (in etcd order; a re-LIST after
an API server or etcd restart) and checks:

- **I1, no partial gang incarnation.** An incarnation of a gang (the pods of one gang name
  in the namespace) lasts while one of its bound members is alive (not Succeeded/Failed, not
  being deleted, not gone), as the scheduler defines it; two incarnations less than
  ``MERGE_GAP`` apart are one (a Job pod KWOK completes before its peers' binds land is not
  a new incarnation). Violation: an incarnation in which the scheduler bound fewer than
  min-available members, counting the members that had Succeeded when it began (Strict or
  NonStrict: NonStrict holds are in memory, binds are all or nothing too). An incarnation
  cut short whose bound members all Succeeded before the next began is judged with the next
  (seed 5035: a leader killed mid-gang, its 4 binds ran to completion before a new leader,
  which bound the other 3 counting them). Excused: the rival bound a member of it (the
  scheduler then places the members the gang lacks together, the rest one by one), or the chaos
  deleted a pending member around its binds (from ``EXCUSE_BEFORE`` s before its first bind
  to ``EXCUSE_AFTER`` s after its last). A scheduler kill, an API server or etcd restart, a
  node deletion or a freeze excuse nothing: the design promises that a gang cut short is
  completed.
- **I2, no node over its allocatable**, at every step of the event order: the sum of the
  requests (cpu, memory, pod count) of the pods bound to it and not finished (pods being
  deleted still hold, as in kube-scheduler) never exceeds its allocatable.
- **I3, no pod bound twice**: a pod's nodeName, once set, never changes (by uid).
- **I4, every gang that can be bound is, within RECOVERY_SECONDS of the last fault.** At the
  end: a live pending member of a gang with min-available members live and bound or
  Succeeded (satisfied: placed one by one), of a gang with fewer but enough live pending
  members for the rest (the members it lacks go together), or of a gang with enough live pending
  members (min-available and total-number, those that Succeeded counted) whose GangGroup
  peers are complete too, must be bound; unless a first-fit of all such pods into
  the free room of the surviving nodes says it cannot (then it is reported, not a violation).
  Gangs left incomplete by the chaos (a pending member deleted, no Job to recreate it) are
  excused and counted, and so are gangs whose members' claims the ResourceClaim controller
  has not yet made from their templates (no scheduler can place such a pod), and gangs with
  a member whose volume was made but whose claim the PV controller has not bound yet.
- **I5, every canary binds** within RECOVERY_SECONDS of its creation.
- **I7, no device allocated to two claims; I8, no allocation outlives its pods** (#24).
  Half the runs give the workload nodes 8 GPUs each as DRA devices (ResourceSlices) and some
  gangs claim 1 or 2 a pod from ResourceClaimTemplates (``DeviceWatch``). I8 is the
  scheduler's part: no claim allocated for no pod or for a pod never bound; claims of pods
  that finished or went are the ResourceClaim controller's to clear, and reported if it lags.
- **I9, no subgroup partly bound** (#23). Half the runs give some PodGroup and Koordinator
  gangs subgroups (``gang-scheduler.io/subgroup-policy``: replicas of 2 to 4 pods told
  apart by a label, the gang needing 1 or more whole replicas and taking more as room
  allows). Violation: an incarnation of such a gang in which the scheduler bound some but
  not all of a replica's members, with I1's excuses (a member the rival bound, a pending
  member the chaos deleted around the binds). I4 excuses a replica the chaos left short of
  its size (it can never be placed whole).
- **I6, no queue above its capability** (#22). Half the runs put their gangs in queues of
  their own: ``cap``, whose cpu capability is half of what its gangs ask for, ``wide`` and the
  default. At every step of the event order, what the pods of ``cap`` hold (the rival's binds
  aside: not the scheduler's doing) never exceeds its capability; I4 excuses the gangs it
  holds back (reported as no room), counting what the rival bound there too (the scheduler
  does: those pods are its own, and hold the queue's room).

- **I10, preemption and reclaim take victims as they promise.** Half the runs add 1 or 2
  gangs at a high PriorityClass of the run's own with the last wave, asking what the rest
  leaves of the cpu and a third to two thirds of what it asks: they fit only by preempting.
  Violation: a victim gang (its members marked ``DisruptionTarget``, reason
  ``PreemptionByScheduler``) left with some but fewer than its minimum members running once
  a pass's victims are marked (``EVICTION_SETTLE``), with I1's excuses, Jobs' gangs aside
  (their pods come again); and, in runs without queues (where nothing reclaims), a victim of
  the high priority. Half the runs also consolidate (the scheduler runs the consolidate
  action, and some koord gangs with members above their minimum are a StatefulSet's pods,
  annotated movable): a moved pod (``DisruptionTarget`` reason ``EvictionByEvictionAPI``)
  counts as a victim, so no gang is left below its minimum by a move.

- **I11 to I14, volumes** (#45). Half the runs give some gangs a scratch volume a pod, of a
  WaitForFirstConsumer class the testbed's provisioner serves on the node the scheduler
  chooses (``bench/chaos_volumes.py`` says exactly what each checks): no pod bound before its
  claim (I11), no volume bound to two claims (I12), each volume on its pod's node (I13), no
  claim asking for its volume on a node its pod will not use (I14).

Also reported (not violations): scheduler exits (a leader that lost its Lease exits by
design), incomplete gangs, errors of the harness itself. Results of ``make chaos`` go to
``bench/results/chaos.{json,md}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pykube
import requests

from bench.chaos_volumes import (
    Mounting,
    Violation,
    Volumes,
    binding_late,
    class_object,
    made_for,
    scratch_claim,
    volume_violations,
    with_scratch,
)
from bench.report import RESULTS, table, write
from bench.watching import follow_through_restarts
from scheduler.core.actions.finish_evictions import RESEND_SECONDS
from scheduler.core.volume_leftovers import grace
from scheduler.model import names
from testbed import cluster as local_cluster
from testbed.nodes import GPU_DRIVER, FakeNode, gpu_slice, node_manifest
from testbed.rest import Rest, is_ready

REPO = Path(__file__).resolve().parent.parent
CHAOS_DIR = REPO / ".cluster-chaos"

NODE_CPU_M = 8000
NODE_MEMORY_MI = 32 * 1024
NODE_PODS = 110
NODE_GPUS = 8  # DRA devices per workload node, in runs with devices (#24)
WORKLOAD_LABEL = "gang-scheduler.io/test"  # the workload's nodeSelector: NAMESPACE
RUN_LABEL = "gang-scheduler.io/chaos-run"  # on every node of a run, for clean-up
CANARY_LABEL = "gang-scheduler.io/chaos-canary"
# In runs with volumes: the scheduler's --volume-bind-timeout, short enough that the waits
# the provisioner makes too long (chaos_volumes.Delaying) end, are taken back and go again
# within a run, and that a choice a killed leader left is released within the recovery.
VOLUME_BIND_TIMEOUT = 4.0
# How long a selected-node may stand while its group waits, before the scheduler releases it
# as a leftover (its wait, then ``volume_leftovers.grace``), and a moment for the write.
LEFTOVER_SECONDS = VOLUME_BIND_TIMEOUT + grace(VOLUME_BIND_TIMEOUT) + 2.0
FIT_SHARE = 0.6  # the workload's requests: at most this share of the surviving capacity
RECOVERY_SECONDS = 60.0  # I4 and I5: the bound after the last fault / a canary's creation
RECOVERY_SECONDS_SMALL = 30.0  # the same, for the small workloads of the short version
SETTLE_SECONDS = 3.0  # settled: no bind for this long
# While gangs that should be bound are not, after the last fault, say which every this long:
# a slow recovery's log then shows what it waited on (session 38: two runs of 35-55 s had
# nothing to show it).
WAITING_SAID_EVERY = 10.0
MERGE_GAP = 2.0  # incarnations closer than this are one
# How long a Job's pods run once running (KWOK, through e2e/kwok-complete-after.yaml).
JOB_POD_RUNS = "pod-complete.stage.kwok.x-k8s.io/delay"
JOB_POD_SECONDS = "5s"
EXCUSE_BEFORE = 5.0
EXCUSE_AFTER = 2.0
HTTP_TIMEOUT = 5.0
USER_AGENT = "gang-scheduler-chaos"
SINGLE = "pod/"

FAULTS_SINGLE = {
    "scheduler-kill": 3.0,
    "apiserver-restart": 2.0,
    "etcd-restart": 1.5,
    "rival-bind": 2.0,
    "node-delete": 1.5,
    "pod-delete": 2.0,
}
FAULTS_HA = {
    "leader-kill": 2.5,
    "leader-freeze": 2.5,
    "apiserver-restart": 1.5,
    "etcd-restart": 1.0,
    "rival-bind": 1.5,
    "node-delete": 1.0,
    "pod-delete": 1.5,
}


# -- the plan: everything a seed decides --------------------------------------------------------


@dataclass(frozen=True)
class GangSpec:
    """One unit of the workload. ``kind``: podgroup, koord, job, single."""

    name: str
    kind: str
    size: int
    min: int
    mode: str = "Strict"
    cpu_m: int = 1000
    memory_mi: int = 1024
    wave: int = 0
    total: int | None = None
    group: tuple[str, ...] = ()  # GangGroup: the names of every gang in it (koord only)
    podgroup_after: bool = False  # the PodGroup is created after its pods
    job_gang: str = ""  # for jobs: "podgroup" or "koord"
    queue: str = ""  # the run's queue it is in, by short name ("": the default queue)
    gpus: int = 0  # GPUs each pod claims by DRA (a ResourceClaimTemplate of the run), #24
    # Subgroups (#23): replicas of this many pods (0: none), the gang needing ``min`` pods,
    # that is min // subgroup whole replicas.
    subgroup: int = 0
    # A preemptor: its pods at the run's high PriorityClass (every other pod has none).
    high: bool = False
    # Consolidation may move its members: a StatefulSet's pods (their controller makes them
    # again), annotated movable; a koord gang with room above its minimum.
    movable: bool = False
    # Each pod mounts a scratch volume made for it, of the run's WaitForFirstConsumer class.
    volume: bool = False


@dataclass(frozen=True)
class FaultSpec:
    at: float
    kind: str
    params: tuple[tuple[str, Any], ...] = ()

    def param(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)


@dataclass(frozen=True)
class Plan:
    seed: int
    small: bool
    mode: str  # single or ha
    lease_seconds: int
    nodes: int
    max_node_deletes: int
    waves: tuple[float, ...]
    gangs: tuple[GangSpec, ...]
    faults: tuple[FaultSpec, ...]
    # Queues (#22): (short name, cpu capability in millicores, 0 for none), the run's own.
    queues: tuple[tuple[str, int], ...] = ()
    # Devices (#24): the workload nodes publish NODE_GPUS GPUs each as a ResourceSlice, and
    # some gangs claim them from ResourceClaimTemplates.
    devices: bool = False
    # Preemption: gangs at the run's high PriorityClass come with the last wave, asking more
    # than the room the others leave (``_plan_preemption``).
    preemption: bool = False
    # Consolidation: the scheduler runs the consolidate action, and some gangs are movable
    # (``_plan_moves``).
    consolidation: bool = False
    # Volumes: the run's StorageClass and provisioner, and gangs with scratch volumes.
    volumes: bool = False

    @property
    def pods(self) -> int:
        return sum(g.size for g in self.gangs)


def _size(rng: random.Random, small: bool) -> int:
    r = rng.random()
    if small:
        return rng.randint(1, 3) if r < 0.6 else rng.randint(4, 8)
    if r < 0.5:
        return rng.randint(1, 4)
    if r < 0.85:
        return rng.randint(5, 12)
    return rng.randint(13, 32)


def _plan_faults(
    rng: random.Random,
    *,
    mode: str,
    small: bool,
    waves: tuple[float, ...],
    window: float,
    max_deletes: int,
    lease: int,
) -> tuple[FaultSpec, ...]:
    """When and what: half of the faults right after a wave (while it binds), at least 2 s
    apart; each with the parameters it needs, and a seed for its own random choices."""
    weights = FAULTS_HA if mode == "ha" else FAULTS_SINGLE
    count = rng.randint(2, 3) if small else rng.randint(3, 6)
    faults: list[FaultSpec] = []
    deletes = 0
    at_times = []
    for _ in range(count):
        if rng.random() < 0.5:
            at_times.append(rng.choice(waves) + rng.uniform(0.0, 1.5))
        else:
            at_times.append(rng.uniform(1.0, window))
    at_times.sort()
    for i in range(1, len(at_times)):  # at least 2 s apart
        at_times[i] = max(at_times[i], at_times[i - 1] + 2.0)
    for at in at_times:
        kinds = [k for k in weights if k != "node-delete" or deletes < max_deletes]
        kind = rng.choices(kinds, weights=[weights[k] for k in kinds])[0]
        params: dict[str, Any] = {"pick": rng.randrange(1 << 30)}
        if kind == "node-delete":
            deletes += 1
        elif kind == "apiserver-restart":
            params["down"] = round(rng.uniform(0.0, 4.0), 2)
        elif kind == "etcd-restart":
            params["signal"] = rng.choice(["SIGTERM", "SIGKILL"])
            params["down"] = round(rng.uniform(0.0, 2.0), 2)
        elif kind == "rival-bind":
            params["count"] = rng.randint(1, 3)
        elif kind == "pod-delete":
            params["count"] = rng.randint(1, 4)
            params["which"] = rng.choice(["pending", "bound", "any"])
        elif kind == "leader-freeze":
            params["seconds"] = round(rng.uniform(1.0, 2.0 * lease + 2.0), 2)
        faults.append(FaultSpec(round(at, 2), kind, tuple(sorted(params.items()))))
    return tuple(faults)


def make_plan(seed: int, *, small: bool = False) -> Plan:
    """The run a seed stands for: pure, so a seed reproduces its workload and its faults."""
    rng = random.Random(seed)
    mode = "ha" if rng.random() < 0.35 else "single"
    nodes = rng.randint(5, 7) if small else rng.randint(14, 20)
    max_deletes = 1 if small else 2
    window = rng.uniform(7, 10) if small else rng.uniform(25, 35)
    wave_count = 2 if small else 3
    waves = (0.0, *sorted(round(rng.uniform(1.5, window * 0.7), 2) for _ in range(wave_count - 1)))
    surviving = nodes - max_deletes
    cpu_budget = surviving * NODE_CPU_M * FIT_SHARE * rng.uniform(0.6, 1.0)
    memory_budget = surviving * NODE_MEMORY_MI * FIT_SHARE
    pod_cap = 40 if small else 240
    gangs: list[GangSpec] = []
    cpu = memory = pods = 0
    counters: Counter[str] = Counter()

    def name(prefix: str) -> str:
        counters[prefix] += 1
        return f"{prefix}{counters[prefix] - 1}"

    for _ in range(400):
        kind = rng.choices(
            ["podgroup", "koord", "group", "job", "single"], weights=[25, 30, 10, 15, 20]
        )[0]
        cpu_m = rng.choice([100, 250, 250, 500, 1000, 2000])
        memory_mi = rng.choice([256, 1024, 2048, 4096])
        wave = rng.randrange(wave_count)
        members: list[GangSpec] = []
        if kind == "single":
            members.append(
                GangSpec(name("s"), "single", 1, 1, cpu_m=cpu_m, memory_mi=memory_mi, wave=wave)
            )
        elif kind == "group":
            count = rng.choice([2, 2, 3])
            gang_names = tuple(name("gg") for _ in range(count))
            for gang in gang_names:
                size = min(_size(rng, small), 12)
                members.append(
                    GangSpec(
                        gang,
                        "koord",
                        size,
                        size,
                        cpu_m=cpu_m,
                        memory_mi=memory_mi,
                        wave=wave,
                        group=gang_names,
                        mode=rng.choice(["Strict", "Strict", "NonStrict"]),
                    )
                )
        else:
            size = _size(rng, small)
            minimum = size
            if kind != "job" and size > 2 and rng.random() < 0.25:
                minimum = size - rng.randint(1, max(1, size // 4))
            gang_mode = "NonStrict" if rng.random() < 0.3 else "Strict"
            total = size if kind == "koord" and rng.random() < 0.2 else None
            members.append(
                GangSpec(
                    name("j" if kind == "job" else "g"),
                    kind,
                    size,
                    minimum,
                    mode=gang_mode,
                    cpu_m=cpu_m,
                    memory_mi=memory_mi,
                    wave=wave,
                    total=total,
                    podgroup_after=kind == "podgroup" and rng.random() < 0.3,
                    job_gang=rng.choice(["podgroup", "koord"]) if kind == "job" else "",
                )
            )
        more_cpu = sum(m.size * m.cpu_m for m in members)
        more_memory = sum(m.size * m.memory_mi for m in members)
        more_pods = sum(m.size for m in members)
        if cpu + more_cpu > cpu_budget or memory + more_memory > memory_budget:
            continue
        if pods + more_pods > pod_cap:
            break
        gangs.extend(members)
        cpu, memory, pods = cpu + more_cpu, memory + more_memory, pods + more_pods

    lease = rng.choice([3, 4, 5])
    faults = _plan_faults(
        rng,
        mode=mode,
        small=small,
        waves=waves,
        window=window,
        max_deletes=max_deletes,
        lease=lease,
    )
    gangs, queues, devices = _plan_features(
        seed, gangs, small=small, surviving=surviving, last_wave=wave_count - 1
    )
    gangs = _plan_volumes(seed, gangs)
    return Plan(
        seed=seed,
        small=small,
        mode=mode,
        lease_seconds=lease,
        nodes=nodes,
        max_node_deletes=max_deletes,
        waves=waves,
        gangs=tuple(gangs),
        faults=faults,
        queues=queues,
        devices=devices,
        preemption=any(g.high for g in gangs),
        consolidation=any(g.movable for g in gangs),
        volumes=any(g.volume for g in gangs),
    )


def _plan_features(
    seed: int, gangs: list[GangSpec], *, small: bool, surviving: int, last_wave: int
) -> tuple[list[GangSpec], tuple[tuple[str, int], ...], bool]:
    """Queues, devices, subgroups and preemptors, each in half the runs, each from a random
    generator of its own: the gangs, the queues and whether the nodes have devices."""
    gangs, queues = _plan_queues(seed, gangs)
    gangs, devices = _plan_devices(seed, gangs, surviving=surviving)
    gangs = _plan_subgroups(seed, gangs)
    gangs = _plan_moves(seed, gangs, wave=last_wave)
    asked = sum(g.size * g.cpu_m for g in gangs)
    gangs += _plan_preemption(
        seed, small=small, free=surviving * NODE_CPU_M - asked, asked=asked, wave=last_wave
    )
    return gangs, queues, devices


def _plan_volumes(seed: int, gangs: list[GangSpec]) -> list[GangSpec]:
    """Half the runs give two in five of their gangs (a GangGroup's together; not movable
    ones, whose pods come again under the same names while their old claims go, nor the
    preemptors) a scratch volume a pod. From a random generator of its own, after every other
    feature: a seed's plan is the same with volumes as without, but for the volumes."""
    rng = random.Random(seed * 7919 + 45)
    if rng.random() < 0.5:
        return gangs
    chosen: dict[tuple[str, ...], bool] = {}
    out = []
    for gang in gangs:
        key = gang.group or (gang.name,)
        if key not in chosen:
            chosen[key] = rng.random() < 0.4
        mounts = chosen[key] and not (gang.movable or gang.high)
        out.append(replace(gang, volume=True) if mounts else gang)
    return out


def _plan_moves(seed: int, gangs: list[GangSpec], *, wave: int) -> list[GangSpec]:
    """Half the runs let the scheduler consolidate, and make movable (a StatefulSet's pods,
    annotated so) seven in ten of their gangs (koord or PodGroup) of 3 members or more, none
    in a GangGroup, of subgroups, claiming devices (a moved pod keeps no claim) or with a
    total-number, each with a member above its minimum. From a random generator of its own: a seed's
    workload and faults are the same with consolidation as without, but for how these
    gangs' pods are made. With them, in the last wave, a gang of 1 or 2 members that each
    need a whole node or most of one, at no higher priority: with the rest bound no node
    has that much free, and consolidation is what may free it (it may also wait, as with no
    room)."""
    rng = random.Random(seed * 7919 + 36)
    if rng.random() < 0.5:
        return gangs
    out = []
    for gang in gangs:
        can = (
            gang.kind in ("koord", "podgroup")
            and gang.size >= 3
            and not (gang.group or gang.subgroup or gang.gpus or gang.total)
        )
        # A member above the minimum: the only kind of member a move may take.
        moving = replace(gang, movable=True, min=min(gang.min, gang.size - 1))
        out.append(moving if can and rng.random() < 0.7 else gang)
    if not any(g.movable for g in out):
        return out  # nothing to move: the run does not consolidate
    size = rng.choice([1, 2])
    # Less than a whole node now and then: a node then needs only its movable pods moved,
    # not emptied (with a whole node, moves had few chances: 3 in 53 runs).
    cpu_m = rng.choice([NODE_CPU_M, NODE_CPU_M * 3 // 4, NODE_CPU_M * 5 // 8])
    return [*out, GangSpec("wn0", "koord", size, size, cpu_m=cpu_m, memory_mi=256, wave=wave)]


def _plan_preemption(seed: int, *, small: bool, free: int, asked: int, wave: int) -> list[GangSpec]:
    """Half the runs add 1 or 2 gangs at the run's high PriorityClass with the last wave, in
    the default queue, asking what the rest of the workload leaves of the surviving nodes'
    cpu (``free``) and 30% to 70% of what it asks (``asked``) besides: once the rest is
    bound, they fit only by preempting. From a random generator of its own: a seed's
    workload and faults are the same with preemption as without, but for these gangs."""
    rng = random.Random(seed * 7919 + 12)
    if rng.random() < 0.5:
        return []
    budget = free + asked * rng.uniform(0.3, 0.7)
    count = rng.choice([1, 2])
    out = []
    for i in range(count):
        cpu_m = rng.choice([3000, NODE_CPU_M // 2])  # a member in half a node at most
        size = max(2, min(round(budget / count / cpu_m), 6 if small else 32))
        kind = rng.choice(["podgroup", "koord"])
        out.append(
            GangSpec(f"hi{i}", kind, size, size, cpu_m=cpu_m, memory_mi=256, wave=wave, high=True)
        )
    return out


def _plan_devices(
    seed: int, gangs: list[GangSpec], *, surviving: int
) -> tuple[list[GangSpec], bool]:
    """Half the runs give their workload nodes GPUs as DRA devices, and some gangs (a
    GangGroup's together) claim 1 or 2 a pod, within FIT_SHARE of the GPUs of the nodes that
    survive. From a random generator of its own: a seed's workload and faults are the same
    with devices as without."""
    rng = random.Random(seed * 7919 + 24)
    if rng.random() < 0.5:
        return gangs, False
    budget = surviving * NODE_GPUS * FIT_SHARE
    chosen: dict[tuple[str, ...], int] = {}
    used = 0.0
    placed = []
    for gang in gangs:
        key = gang.group or (gang.name,)
        if key not in chosen:
            gpus = rng.choice([1, 2]) if rng.random() < 0.4 else 0
            asked = gpus * sum(g.size for g in gangs if (g.group or (g.name,)) == key)
            if used + asked > budget:
                gpus = 0
            used += gpus and asked
            chosen[key] = gpus
        placed.append(replace(gang, gpus=chosen[key]))
    return placed, True


def _plan_subgroups(seed: int, gangs: list[GangSpec]) -> list[GangSpec]:
    """Half the runs give some PodGroup and Koordinator gangs (not of a GangGroup, not
    Jobs: a Job's pods share one template) subgroups (#23): replicas of 2 to 4 pods, the
    gang's size rounded down to whole replicas, needing 1 or more of them (Strict: a gang
    of subgroups is). From a random generator of its own: a seed's workload and faults are
    the same with subgroups as without, but for the sizes rounded down."""
    rng = random.Random(seed * 7919 + 23)
    if rng.random() < 0.5:
        return gangs
    out = []
    for gang in gangs:
        chosen = gang.kind in ("podgroup", "koord") and not gang.group and gang.size >= 4
        if chosen and rng.random() < 0.5:
            sub = rng.choice([s for s in (2, 3, 4) if gang.size // s >= 2])
            count = gang.size // sub
            least = rng.randint(1, count)
            out.append(
                replace(
                    gang, subgroup=sub, size=count * sub, min=least * sub, mode="Strict",
                    total=None,
                )
            )  # fmt: skip
        else:
            out.append(gang)
    return out


REPLICA_LABEL = "gang-scheduler.io/chaos-replica"
MOVABLE_SET_LABEL = "gang-scheduler.io/chaos-movable"  # a movable gang's StatefulSet's pods
# The DisruptionTarget reasons of a preemption's or a reclaim's victims, and of a move.
PREEMPTED, MOVED = "PreemptionByScheduler", "EvictionByEvictionAPI"
# The actions of a run that consolidates: moving before evicting, as KAI orders them.
CONSOLIDATING = "finish-evictions,allocate,hold-head,evict-stale,consolidate,preempt,reclaim"


def subgroup_policy(gang: GangSpec) -> str:
    """The gang's subgroup policy (#23), as our annotation says it."""
    return json.dumps(
        [
            {
                "name": "replica",
                "subGroupSize": gang.subgroup,
                "minSubGroups": gang.min // gang.subgroup,
                "matchLabelKeys": [REPLICA_LABEL],
            }
        ]
    )


def device_objects(plan: Plan, namespace: str, nodes: list[str]) -> list[tuple[str, dict]]:
    """The run's DeviceClass, a ResourceSlice of NODE_GPUS GPUs per workload node, and the
    ResourceClaimTemplates gpu-1 and gpu-2 in its namespace: (collection path, object)."""
    if not plan.devices:
        return []
    run = {RUN_LABEL: namespace}
    out: list[tuple[str, dict]] = [
        (
            "/apis/resource.k8s.io/v1/deviceclasses",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": gpu_class(namespace), "labels": run},
                "spec": {
                    "selectors": [{"cel": {"expression": f'device.driver == "{GPU_DRIVER}"'}}]
                },
            },
        )
    ]
    for node in nodes:
        manifest = gpu_slice(node, gpus=NODE_GPUS, labels=run)
        out.append(("/apis/resource.k8s.io/v1/resourceslices", manifest))
    for count in (1, 2):
        request = {"deviceClassName": gpu_class(namespace), "count": count}
        out.append(
            (
                f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates",
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaimTemplate",
                    "metadata": {"name": f"gpu-{count}", "namespace": namespace},
                    "spec": {
                        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}
                    },
                },
            )
        )
    return out


def gpu_class(namespace: str) -> str:
    return f"gpu.{namespace}"


def _plan_queues(
    seed: int, gangs: list[GangSpec]
) -> tuple[list[GangSpec], tuple[tuple[str, int], ...]]:
    """Half the runs put their gangs in queues (#22): ``cap``, whose capability is half of
    what its gangs ask for (so it holds some back while room is free), ``wide`` (weight 2,
    no limit), or the default queue; a GangGroup's gangs share one. From a random generator
    of its own: a seed's workload and faults are the same with queues as without."""
    rng = random.Random(seed * 7919 + 22)
    if rng.random() < 0.5:
        return gangs, ()
    chosen: dict[tuple[str, ...], str] = {}
    placed = []
    for gang in gangs:
        key = gang.group or (gang.name,)
        if key not in chosen:
            chosen[key] = rng.choices(["cap", "wide", ""], weights=[4, 3, 3])[0]
        placed.append(replace(gang, queue=chosen[key]))
    asked = sum(g.size * g.cpu_m for g in placed if g.queue == "cap")
    return placed, (("cap", max(asked // 2, 1000)), ("wide", 0))


# -- manifests ----------------------------------------------------------------------------------


def pod_spec(scheduler: str, selector: dict[str, str], cpu_m: int, memory_mi: int) -> dict:
    return {
        "schedulerName": scheduler,
        "nodeSelector": selector,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {"requests": {"cpu": f"{cpu_m}m", "memory": f"{memory_mi}Mi"}},
            }
        ],
    }


def with_gpus(spec: dict, gpus: int) -> dict:
    """The pod spec claiming ``gpus`` GPUs from the run's template."""
    container = {**spec["containers"][0]}
    container["resources"] = {**container["resources"], "claims": [{"name": "gpu"}]}
    return {
        **spec,
        "containers": [container],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": f"gpu-{gpus}"}],
    }


def gang_metadata(gang: GangSpec, namespace: str, *, pod_group: bool) -> tuple[dict, dict]:
    """(labels, annotations) that make a pod a member of ``gang``."""
    if gang.kind == "single":
        return {}, {}
    if pod_group:
        annotations = {names.KOORD_MODE: gang.mode} if gang.mode != "Strict" else {}
        return {names.POD_GROUP_LABEL: gang.name}, annotations
    annotations = {
        names.KOORD_NAME: gang.name,
        names.KOORD_MIN_AVAILABLE: str(gang.min),
        names.KOORD_MODE: gang.mode,
    }
    if gang.total:
        annotations[names.KOORD_TOTAL_NUMBER] = str(gang.total)
    if gang.group:
        annotations[names.KOORD_GROUPS] = json.dumps([f"{namespace}/{g}" for g in gang.group])
    return {}, annotations


def wave_objects(plan: Plan, wave: int, namespace: str, scheduler: str) -> list[tuple[str, dict]]:
    """(collection path, object) to create, in order, for one wave."""
    selector = {WORKLOAD_LABEL: namespace}
    out: list[tuple[str, dict]] = []
    later: list[tuple[str, dict]] = []
    for gang in plan.gangs:
        if gang.wave != wave:
            continue
        spec = pod_spec(scheduler, selector, gang.cpu_m, gang.memory_mi)
        if gang.gpus:
            spec = with_gpus(spec, gang.gpus)
        if gang.volume:
            spec = with_scratch(spec, namespace)
        if gang.high:
            spec = {**spec, "priorityClassName": high_priority_class(namespace)}
        pod_group = gang.kind == "podgroup" or gang.job_gang == "podgroup"
        labels, annotations = gang_metadata(gang, namespace, pod_group=pod_group)
        queued = {names.QUEUE: queue_name(namespace, gang.queue)} if gang.queue else {}
        labels = {**labels, **queued}
        if pod_group:
            podgroup = {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": gang.name, "namespace": namespace, "labels": queued},
                "spec": {"minMember": gang.min},
            }
            if gang.subgroup:
                podgroup["metadata"]["annotations"] = {names.SUBGROUP_POLICY: subgroup_policy(gang)}
            (later if gang.podgroup_after else out).append(
                (f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups", podgroup)
            )
        if gang.kind == "job":
            job = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": gang.name, "namespace": namespace},
                "spec": {
                    "parallelism": gang.size,
                    "completions": gang.size,
                    "backoffLimit": 100,
                    "template": {
                        # A Job's pods run a few seconds, as work does, instead of KWOK's
                        # instant completion: a member completed 33 ms after its bind, before
                        # the restarted scheduler's first pass, ended its incarnation with 1
                        # of 11 bound (seed 8036), which no real training pod does.
                        "metadata": {
                            "labels": labels,
                            "annotations": {**annotations, JOB_POD_RUNS: JOB_POD_SECONDS},
                        },
                        "spec": {**spec, "restartPolicy": "Never"},
                    },
                },
            }
            out.append((f"/apis/batch/v1/namespaces/{namespace}/jobs", job))
            continue
        if gang.movable:
            out.append(_movable_set(gang, namespace, labels, annotations, spec))
            continue
        for i in range(gang.size):
            pod_name = gang.name if gang.kind == "single" else f"{gang.name}-{i}"
            mine_labels, mine_annotations = labels, annotations
            if gang.subgroup:
                mine_labels = {**labels, REPLICA_LABEL: str(i // gang.subgroup)}
                if not pod_group:
                    mine_annotations = {
                        **annotations,
                        names.SUBGROUP_POLICY: subgroup_policy(gang),
                    }
            out.append(
                (
                    f"/api/v1/namespaces/{namespace}/pods",
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            "name": pod_name,
                            "namespace": namespace,
                            "labels": mine_labels,
                            "annotations": mine_annotations,
                        },
                        "spec": spec,
                    },
                )
            )
    return out + later


def _movable_set(
    gang: GangSpec, namespace: str, labels: dict, annotations: dict, spec: dict
) -> tuple[str, dict]:
    """A movable gang: a StatefulSet whose pods (GANG-0, GANG-1, ..., made at once) carry the
    gang's annotations and the movable one; its controller makes a moved pod again."""
    chosen = {MOVABLE_SET_LABEL: gang.name}
    return (
        f"/apis/apps/v1/namespaces/{namespace}/statefulsets",
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": gang.name, "namespace": namespace},
            "spec": {
                "replicas": gang.size,
                "serviceName": gang.name,
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": chosen},
                "template": {
                    "metadata": {
                        "labels": {**labels, **chosen},
                        "annotations": {**annotations, names.MOVABLE: "true"},
                    },
                    "spec": spec,
                },
            },
        },
    )


HIGH_PRIORITY = 1000


def high_priority_class(namespace: str) -> str:
    """The run's PriorityClass for its preemptors (cluster-wide: named after the run)."""
    return f"{namespace}-high"


def queue_name(namespace: str, short: str) -> str:
    """A run's queue: Queues are cluster-wide, so named after the run's namespace."""
    return f"{namespace}-{short}"


def queue_objects(plan: Plan, namespace: str) -> list[dict]:
    out = []
    for short, cpu_m in plan.queues:
        spec: dict[str, Any] = {"weight": 2 if short == "wide" else 1}
        if cpu_m:
            spec["capability"] = {"cpu": f"{cpu_m}m"}
        out.append(
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {
                    "name": queue_name(namespace, short),
                    "labels": {RUN_LABEL: namespace},
                },
                "spec": spec,
            }
        )
    return out


def canary_pods(index: int, namespace: str, scheduler: str) -> list[dict]:
    gang = f"canary-{index}"
    annotations = {names.KOORD_NAME: gang, names.KOORD_MIN_AVAILABLE: "2"}
    spec = pod_spec(scheduler, {CANARY_LABEL: namespace}, 100, 64)
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{gang}-{i}", "namespace": namespace, "annotations": annotations},
            "spec": spec,
        }
        for i in range(2)
    ]


# -- talking to the API server, never without a timeout ----------------------------------------


class Api:
    """pykube's session (client certificates from the kubeconfig), a timeout on every call."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self.client = pykube.HTTPClient(
            pykube.KubeConfig.from_file(str(kubeconfig)), timeout=HTTP_TIMEOUT
        )
        self.base = self.client.url

    def request(
        self,
        method: str,
        path: str,
        *,
        body: dict | None = None,
        timeout: float = HTTP_TIMEOUT,
        params: dict | None = None,
    ) -> requests.Response:
        return self.client.session.request(
            method, self.base + path, json=body, params=params, timeout=timeout
        )

    def retrying(
        self,
        method: str,
        path: str,
        *,
        body: dict | None = None,
        within: float = 60.0,
        ok: Iterable[int] = (200, 201, 202),
        params: dict | None = None,
    ) -> requests.Response | None:
        """Retry connection errors and 5xx (the API server may be restarting) for ``within``
        seconds; a 4xx answer is returned as it is. None if it never answered."""
        deadline = time.monotonic() + within
        while True:
            try:
                response = self.request(method, path, body=body, params=params)
                if response.status_code in ok or response.status_code < 500:
                    return response
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                return None
            time.sleep(0.3)

    def create(self, path: str, obj: dict, *, within: float = 60.0) -> bool:
        response = self.retrying("POST", path, body=obj, within=within)
        return response is not None and response.status_code in (201, 409)


# -- the observer: every pod of the namespace, in etcd order --------------------------------------


TERMINAL = ("Succeeded", "Failed")


@dataclass
class PodState:
    uid: str
    name: str
    gang: str  # the gang's name, or "pod/NAME" for a pod of no gang
    scheduler: str
    cpu_m: int
    memory_mi: int
    job: bool
    queue: str = ""  # the queue its label names
    gpus: int = 0  # claimed from the run's gpu-N templates
    replica: str = ""  # the subgroup it is in (#23): its replica label
    priority: int = 0  # spec.priority, as admission set it
    node: str = ""
    phase: str = "Pending"
    deleting: bool = False
    gone: bool = False
    created_t: float = 0.0
    # When the pod's status first had an entry for every claim its spec makes from a
    # template (the ResourceClaim controller's work); created_t for a pod making none.
    claimed_t: float | None = None
    bound_t: float | None = None
    ended_t: float | None = None
    gone_t: float | None = None  # when the API server said it was deleted
    # When it was seen marked for eviction by the scheduler (DisruptionTarget, reason
    # PreemptionByScheduler: a preemption's or a reclaim's victim; EvictionByEvictionAPI:
    # moved by consolidation, the only user of the Eviction API in a run).
    evicted_t: float | None = None
    moved: bool = False
    scratch: str = ""  # the claim its scratch volume makes, if it has one
    bound_rv: int = 0  # the resourceVersion at which it was first seen bound
    bind_watched: bool = False  # that version is its bind's (a watch event), not a LIST's
    # The node a volume already made for its claim is on: the only node it may go to.
    pinned: str = ""

    @property
    def alive(self) -> bool:
        return not self.gone and not self.deleting and self.phase not in TERMINAL

    @property
    def holds(self) -> bool:
        return bool(self.node) and not self.gone and self.phase not in TERMINAL


def _cpu_m(value: str) -> int:
    value = str(value)
    if value.endswith("m"):
        return int(value[:-1])
    return int(float(value) * 1000)


_MEMORY_UNITS = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024}


def _memory_mi(value: str) -> int:
    value = str(value)
    for unit, factor in _MEMORY_UNITS.items():
        if value.endswith(unit):
            return int(float(value[: -len(unit)]) * factor)
    return int(float(value) / (1024 * 1024))


def _claims_made(spec: dict, status: dict) -> bool:
    """Whether the ResourceClaim controller has done its part for every claim the pod makes
    from a template: the pod's status has an entry for it (naming the claim made, or none
    when none was needed). Until then the scheduler cannot place the pod, whatever it does.
    Claims a pod names directly are not followed (the harness's pods name none)."""
    wanted = {
        entry.get("name")
        for entry in spec.get("resourceClaims") or []
        if entry.get("resourceClaimTemplateName")
    }
    done = {entry.get("name") for entry in status.get("resourceClaimStatuses") or []}
    return wanted <= done


def _gpus(spec: dict) -> int:
    """The GPUs a pod claims from the run's templates (gpu-1, gpu-2)."""
    total = 0
    for entry in spec.get("resourceClaims") or []:
        template = entry.get("resourceClaimTemplateName") or ""
        if template.startswith("gpu-") and template[4:].isdigit():
            total += int(template[4:])
    return total


def gang_of(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    if names.KOORD_NAME in annotations:
        return annotations[names.KOORD_NAME]
    if names.POD_GROUP_LABEL in labels:
        return labels[names.POD_GROUP_LABEL]
    return SINGLE + meta.get("name", "")


class Observer:
    """LIST+WATCH of the namespace's pods in a thread; builds each pod's history, checks I2
    and I3 at every event, and records the bind/end events that I1 is judged on."""

    def __init__(
        self,
        api: Api,
        namespace: str,
        allocatable: dict[str, tuple[int, int, int]],
        t0: float,
        *,
        capabilities: dict[str, int] | None = None,
        rival_node: str = "",
    ) -> None:
        # I6: per queue, its cpu capability (millicores); what its pods hold, the rival's
        # binds aside (they are not the scheduler's doing).
        self.capabilities = dict(capabilities or {})
        self.rival_node = rival_node
        self.queue_use: dict[str, int] = defaultdict(int)
        self.over_queues: set[str] = set()
        self.api = api
        self.namespace = namespace
        self.allocatable = dict(allocatable)  # node -> (cpu m, memory Mi, pods)
        self.t0 = t0
        self.lock = threading.Lock()
        self.pods: dict[str, PodState] = {}
        self.events: list[tuple[float, str, str]] = []  # (t, "bound"|"ended", uid)
        self.violations: list[Violation] = []
        self.use: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        self.over: set[str] = set()
        self.last_bind = 0.0
        self.relists = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos observer", daemon=True)
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def start(self) -> Observer:
        self._thread.start()
        self._ready.wait(timeout=30)
        return self

    def stop(self) -> None:
        self._stop.set()
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # its loop closed already
                loop.call_soon_threadsafe(task.cancel)
        self._thread.join(timeout=10)

    # the stream (``watching``), on an event loop of this thread's own

    def _run(self) -> None:
        asyncio.run(self._follow())

    async def _follow(self) -> None:
        self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        if self._stop.is_set():
            return
        await follow_through_restarts(
            kubeconfig=self.api.kubeconfig,
            path=f"/api/v1/namespaces/{self.namespace}/pods",
            listed=self._listed,
            changed=self._changed,
            stop=self._stop,
            user_agent=USER_AGENT,
        )

    def _listed(self, items: list[dict]) -> None:
        with self.lock:
            self.relists += 1
            t = self.now()
            seen = {item["metadata"]["uid"] for item in items}
            for uid, pod in self.pods.items():  # what went away first: it frees room
                if uid not in seen and not pod.gone:
                    self._update(pod, t, gone=True)
            for item in sorted(items, key=lambda i: not _frees(i)):
                self._apply(item, t)
        self._ready.set()

    def _changed(self, kind: str, obj: dict) -> None:
        with self.lock:
            t = self.now()
            if kind == "DELETED":
                pod = self.pods.get(obj["metadata"]["uid"])
                if pod is None:
                    self._apply(obj, t)
                    pod = self.pods[obj["metadata"]["uid"]]
                self._update(pod, t, gone=True)
            else:
                self._apply(obj, t, watched=True)

    # the state

    def _apply(self, obj: dict, t: float, *, watched: bool = False) -> None:
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        uid = meta["uid"]
        pod = self.pods.get(uid)
        if pod is None:
            cpu = memory = 0
            for container in spec.get("containers") or []:
                req = (container.get("resources") or {}).get("requests") or {}
                cpu += _cpu_m(req.get("cpu", "0"))
                memory += _memory_mi(req.get("memory", "0"))
            pod = PodState(
                uid=uid,
                name=meta["name"],
                gang=gang_of(obj),
                scheduler=spec.get("schedulerName", ""),
                cpu_m=cpu,
                memory_mi=memory,
                job=any(o.get("kind") == "Job" for o in meta.get("ownerReferences") or []),
                queue=(meta.get("labels") or {}).get(names.QUEUE, ""),
                gpus=_gpus(spec),
                replica=(meta.get("labels") or {}).get(REPLICA_LABEL, ""),
                priority=int(spec.get("priority") or 0),
                created_t=t,
                scratch=scratch_claim(obj),
            )
            self.pods[uid] = pod
        reasons = {
            c.get("reason")
            for c in status.get("conditions") or []
            if c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        }
        if pod.evicted_t is None and reasons & {PREEMPTED, MOVED}:
            pod.evicted_t, pod.moved = t, MOVED in reasons
        if pod.claimed_t is None and _claims_made(spec, status):
            pod.claimed_t = t
        if not pod.node and spec.get("nodeName"):
            with contextlib.suppress(ValueError):
                pod.bound_rv = int(meta.get("resourceVersion") or 0)
            pod.bind_watched = watched
        self._update(
            pod,
            t,
            node=spec.get("nodeName") or "",
            phase=status.get("phase") or "Pending",
            deleting=bool(meta.get("deletionTimestamp")),
        )

    def _update(
        self,
        pod: PodState,
        t: float,
        *,
        node: str | None = None,
        phase: str | None = None,
        deleting: bool | None = None,
        gone: bool = False,
    ) -> None:
        held, was_alive = pod.holds, pod.alive
        if node is not None and node != pod.node:
            if pod.node:
                self.violations.append(
                    Violation(
                        "I3",
                        f"pod {pod.name} bound twice: {pod.node} then {node or '-'}",
                        {"pod": pod.name, "uid": pod.uid, "t": t},
                    ),
                )
            if node:
                pod.node = node
                pod.bound_t = t
                self.last_bind = time.monotonic()
                self.events.append((t, "bound", pod.uid))
        if phase is not None:
            pod.phase = phase
        if deleting is not None:
            pod.deleting = pod.deleting or deleting
        if gone and not pod.gone:
            pod.gone, pod.gone_t = True, t
        if was_alive and not pod.alive:
            pod.ended_t = t
            if pod.node:
                self.events.append((t, "ended", pod.uid))
        if held != pod.holds and pod.node:
            sign = 1 if pod.holds else -1
            use = self.use[pod.node]
            use[0] += sign * pod.cpu_m
            use[1] += sign * pod.memory_mi
            use[2] += sign
            self._check_node(pod.node, t)
            if pod.queue in self.capabilities and pod.node != self.rival_node:
                self.queue_use[pod.queue] += sign * pod.cpu_m
                self._check_queue(pod.queue, t)

    def _check_node(self, node: str, t: float) -> None:
        limit = self.allocatable.get(node)
        if limit is None:
            return
        use = self.use[node]
        over = use[0] > limit[0] or use[1] > limit[1] or use[2] > limit[2]
        if over and node not in self.over:
            holders = sorted(p.name for p in self.pods.values() if p.node == node and p.holds)
            self.violations.append(
                Violation(
                    "I2",
                    f"node {node} over its allocatable: cpu {use[0]}m/{limit[0]}m, memory "
                    f"{use[1]}Mi/{limit[1]}Mi, pods {use[2]}/{limit[2]}",
                    {"node": node, "t": t, "pods": holders},
                )
            )
            self.over.add(node)
        elif not over:
            self.over.discard(node)

    def _check_queue(self, queue: str, t: float) -> None:
        cap, use = self.capabilities[queue], self.queue_use[queue]
        if use > cap and queue not in self.over_queues:
            holders = sorted(
                p.name
                for p in self.pods.values()
                if p.queue == queue and p.holds and p.node != self.rival_node
            )
            self.violations.append(
                Violation(
                    "I6",
                    f"queue {queue} over its capability: cpu {use}m of {cap}m",
                    {"queue": queue, "t": t, "pods": holders},
                )
            )
            self.over_queues.add(queue)
        elif use <= cap:
            self.over_queues.discard(queue)

    def copy(self) -> dict[str, PodState]:
        with self.lock:
            return {uid: PodState(**asdict(p)) for uid, p in self.pods.items()}


def _frees(item: dict) -> bool:
    phase = (item.get("status") or {}).get("phase")
    return phase in TERMINAL or bool(item["metadata"].get("deletionTimestamp"))


# -- devices (#24) ---------------------------------------------------------------------------------


class DeviceWatch:
    """I7 and I8, for runs whose pods claim GPUs by DRA. Polls the run's ResourceClaims
    (every POLL_SECONDS, from the plan's start to the check):

    - **I7, no device allocated to two claims**: at every poll, no (driver, pool, device) is
      in the allocation of two claims of the run.
    - **I8, no allocation outlives its pods**: at the check (after quiescence, once the
      ResourceClaim controller had DEVICE_SETTLE_SECONDS to catch up), every allocated claim
      is reserved only for pods that exist, are bound and have not finished, and for one at
      least: nothing is left allocated for pods gone, finished or never bound.
    """

    POLL_SECONDS = 0.5
    DEVICE_SETTLE_SECONDS = 20.0

    def __init__(self, api: Api, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self._stop = threading.Event()
        self._found: list[Violation] = []
        self._seen: set[tuple[str, ...]] = set()
        self.allocated: set[str] = set()  # claims seen allocated (uids): the run used devices
        self.controller_lag: list[str] = []  # claims the ResourceClaim controller left (I8)
        self._thread = threading.Thread(target=self._run, daemon=True, name="device watch")

    def start(self) -> DeviceWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def claims(self) -> list[dict] | None:
        response = self.api.retrying(
            "GET", f"/apis/resource.k8s.io/v1/namespaces/{self.namespace}/resourceclaims", within=5
        )
        if response is None or response.status_code != 200:
            return None
        return response.json().get("items", [])

    def _run(self) -> None:
        while not self._stop.wait(self.POLL_SECONDS):
            with contextlib.suppress(Exception):
                claims = self.claims()
                if claims is not None:
                    self._check_twice(claims)

    def _check_twice(self, claims: list[dict]) -> None:
        holder: dict[tuple[str, str, str], str] = {}
        for claim in claims:
            allocation = (claim.get("status") or {}).get("allocation") or {}
            if allocation:
                self.allocated.add(claim["metadata"].get("uid", ""))
            for r in (allocation.get("devices") or {}).get("results") or []:
                device = (r.get("driver", ""), r.get("pool", ""), r.get("device", ""))
                name = claim["metadata"]["name"]
                other = holder.setdefault(device, name)
                pair = (*device, other, name)
                if other != name and pair not in self._seen:
                    self._seen.add(pair)
                    self._found.append(
                        Violation(
                            "I7",
                            f"device {'/'.join(device)} allocated to claims {other} and {name}",
                            {"device": "/".join(device), "claims": [other, name]},
                        )
                    )

    def violations(self) -> list[Violation]:
        claims = self.claims()
        if claims is not None:
            self._check_twice(claims)
        return list(self._found)

    def outliving(self, pods: Callable[[], dict[str, PodState]]) -> list[Violation]:
        """I8, once the ResourceClaim controller had DEVICE_SETTLE_SECONDS. What the
        scheduler owes: no claim allocated for no pod, or for a pod it never bound (its
        writes land before the bind and are taken back if the bind does not). A claim left
        reserved for pods that were bound and have finished or gone is the controller's to
        clear (it may lag after an API server restart: seed 41021, its pod watch missed the
        completions that landed as the API server came back): counted in
        ``controller_lag``, not a violation."""
        deadline = time.monotonic() + self.DEVICE_SETTLE_SECONDS
        while True:
            ours, lagging = self._stale(pods())
            if (not ours and not lagging) or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        self.controller_lag = [name for name, _, _ in lagging]
        return [
            Violation(
                "I8",
                f"claim {name} allocated for "
                + (f"pods never bound: {', '.join(bad)}" if bad else "no pod at all"),
                {"claim": name, "pods": bad, **state},
            )
            for name, bad, state in ours
        ]

    def _stale(
        self, pods: dict[str, PodState]
    ) -> tuple[list[tuple[str, list[str], dict]], list[tuple[str, list[str], dict]]]:
        """Allocated claims whose pods are not all bound and alive: (the scheduler's: a pod
        never bound, or none at all; the controller's: pods bound once, finished or gone)."""
        states = {p.uid: p for p in pods.values()}
        ours, lagging = [], []
        for claim in self.claims() or []:
            status = claim.get("status") or {}
            if not status.get("allocation"):
                continue
            reserved = [r for r in status.get("reservedFor") or [] if r.get("resource") == "pods"]
            unbound = [
                r["name"]
                for r in reserved
                if (p := states.get(r.get("uid", ""))) is None or not p.node
            ]
            done = [
                r["name"]
                for r in reserved
                if (p := states.get(r.get("uid", ""))) is not None and p.node and not p.alive
            ]
            if not unbound and not done and reserved:
                continue
            said = {
                r["name"]: (
                    "never seen"
                    if (p := states.get(r.get("uid", ""))) is None
                    else f"phase {p.phase}, node {p.node or '-'}, deleting {p.deleting}, "
                    f"gone {p.gone}"
                )
                for r in reserved
            }
            meta = claim["metadata"]
            state = {
                "reserved": said,
                "finalizers": meta.get("finalizers", []),
                "deleting": bool(meta.get("deletionTimestamp")),
                "owners": [o.get("name") for o in meta.get("ownerReferences") or []],
            }
            if unbound or not reserved:
                ours.append((meta["name"], unbound, state))
            else:
                lagging.append((meta["name"], done, state))
        return ours, lagging


# -- the schedulers -------------------------------------------------------------------------------


@dataclass
class Replica:
    index: int
    log: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    frozen: bool = False
    killed: bool = False  # by us: its exit is no news
    started_at: float = 0.0


class Replicas:
    """One scheduler, or two with leader election; an exited one is started again at once."""

    def __init__(
        self,
        directory: Path,
        kubeconfig: Path,
        logs: Path,
        *,
        name: str,
        namespace: str,
        ha: bool,
        lease_seconds: int,
        clock: Callable[[], float],
        consolidating: bool = False,
        volume_bind_timeout: float | None = None,
    ) -> None:
        self.directory = directory
        self.consolidating = consolidating
        self.volume_bind_timeout = volume_bind_timeout
        self.kubeconfig = kubeconfig
        self.name = name
        self.namespace = namespace
        self.ha = ha
        self.lease_seconds = lease_seconds
        self.clock = clock
        self.replicas = [Replica(i, logs / f"scheduler-{i}.log") for i in range(2 if ha else 1)]
        self.exits: list[dict] = []

    def argv(self) -> list[str]:
        argv = [
            sys.executable,
            "-m",
            "scheduler",
            "run",
            "--kubeconfig",
            str(self.kubeconfig),
            "--scheduler-name",
            self.name,
            "--max-backoff",
            "2",
            "-v",
        ]
        if self.ha:
            argv += [
                "--leader-elect",
                "--leader-elect-namespace",
                self.namespace,
                "--lease-duration",
                str(self.lease_seconds),
            ]
        if self.consolidating:
            argv += ["--actions", CONSOLIDATING]
        if self.volume_bind_timeout is not None:
            argv += ["--volume-bind-timeout", f"{self.volume_bind_timeout:g}"]
        return argv

    def start(self, replica: Replica) -> None:
        replica.log.parent.mkdir(parents=True, exist_ok=True)
        with replica.log.open("ab") as out:
            out.write(f"=== chaos: start #{replica.starts} at t={self.clock()}\n".encode())
            out.flush()
            replica.process = subprocess.Popen(
                self.argv(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=REPO,
                start_new_session=True,
            )
        replica.starts += 1
        replica.started_at = time.monotonic()
        replica.frozen = replica.killed = False
        _register(self.directory, replica.process.pid)

    def start_all(self) -> None:
        for replica in self.replicas:
            self.start(replica)

    def supervise(self) -> None:
        for replica in self.replicas:
            process = replica.process
            if process is None or process.poll() is None:
                continue
            if time.monotonic() - replica.started_at < 1.0:
                continue  # a crash loop: at most one start a second
            if not replica.killed:
                tail = _tail(replica.log, 6)
                self.exits.append(
                    {
                        "replica": replica.index,
                        "t": self.clock(),
                        "code": process.returncode,
                        # A leader that could not renew its Lease exits by design.
                        "expected": any("lost leadership" in line for line in tail),
                        "log_tail": tail,
                    }
                )
            self.start(replica)

    def kill(self, replica: Replica) -> None:
        process = replica.process
        if process is None:
            return
        replica.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGCONT)
            process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        self.start(replica)

    def freeze(self, replica: Replica) -> None:
        if replica.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(replica.process.pid, signal.SIGSTOP)
            replica.frozen = True

    def thaw(self, replica: Replica) -> None:
        if replica.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(replica.process.pid, signal.SIGCONT)
            replica.frozen = False

    def stop_all(self) -> None:
        for replica in self.replicas:
            process = replica.process
            if process is None or process.poll() is not None:
                continue
            replica.killed = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)


def _register(directory: Path, pid: int) -> None:
    """Record a scheduler in the control plane's state.json so that ``down`` stops it even if
    this harness is killed; entries of dead schedulers are dropped."""
    plane = local_cluster.read_state(directory)
    if plane is None:
        return
    kept = tuple(p for p in plane.processes if p.name != "gang-scheduler-chaos" or p.alive())
    process = local_cluster.Process("gang-scheduler-chaos", pid, os.path.realpath(sys.executable))
    local_cluster._write_state(
        local_cluster.ControlPlane(plane.directory, plane.server, (*kept, process))
    )


def source_hash() -> str:
    """Which scheduler was tested: a hash of the Python files under scheduler/ (the working
    tree, which may be ahead of the last commit)."""
    digest = hashlib.sha256()
    for path in sorted((REPO / "scheduler").rglob("*.py")):
        digest.update(str(path.relative_to(REPO)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _tail(path: Path, lines: int) -> list[str]:
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - 20_000))
            text = f.read().decode(errors="replace")
    except FileNotFoundError:
        return []
    return text.splitlines()[-lines:]


# -- one run ----------------------------------------------------------------------------------


@dataclass
class RunResult:
    seed: int
    small: bool
    mode: str
    nodes: int
    pods: int
    gangs: int
    faults: list[dict] = field(default_factory=list)
    violations: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    canary_seconds: list[float] = field(default_factory=list)  # creation to bound
    canary_recovery_seconds: list[float] = field(default_factory=list)  # last fault to bound
    recovery_seconds: float | None = None  # last fault's end to every gang bound
    # The longest a gang waited on the scheduler alone after the last fault (SchedulerWait).
    scheduler_recovery_seconds: float | None = None
    scheduler_exits: list[dict] = field(default_factory=list)
    incomplete_gangs: list[str] = field(default_factory=list)
    no_room: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0
    setup_seconds: float = 0.0
    relists: int = 0
    claims_allocated: int = 0  # claims seen allocated, in runs with devices (#24)
    # Claims of pods that finished or went, still allocated DEVICE_SETTLE_SECONDS after
    # quiescence: the ResourceClaim controller's lag, reported (I8 is the scheduler's part).
    claims_controller_lag: list[str] = field(default_factory=list)
    # Gangs still waiting at the check for the ResourceClaim controller to make their
    # members' claims from templates: its lag, excused from I4 and reported.
    claims_not_made: list[str] = field(default_factory=list)
    evicted: int = 0  # pods a preemption or a reclaim evicted, or consolidation moved
    # Runs with volumes: claims seen bound; pods whose claim's bind I11 could not order
    # against theirs (first seen bound in a re-list); the provisioner's errors.
    volumes_bound: int = 0
    volume_binds_unordered: int = 0
    provisioner_errors: list[str] = field(default_factory=list)
    moved: int = 0  # of those, moved
    # What the plan had: queues, devices, subgroups, preemption.
    features: list[str] = field(default_factory=list)
    logs: str = ""
    scheduler_source: str = ""  # a hash of scheduler/ as the run started it


class Run:
    def __init__(self, directory: Path, plan: Plan, *, namespace: str) -> None:
        self.directory = directory
        self.plan = plan
        self.namespace = namespace
        self.api = Api(directory / "kubeconfig")
        self.t0 = time.monotonic()
        self.logs = directory / "logs" / f"chaos-{namespace}"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.actions_log = self.logs / "actions.log"
        self.scheduler = namespace  # its own scheduler name, and Lease name
        self.result = RunResult(
            plan.seed,
            plan.small,
            plan.mode,
            plan.nodes,
            plan.pods,
            len({g.name for g in plan.gangs}),
            logs=str(self.logs),
        )
        self.result.features = [
            name
            for name, present in (
                ("queues", bool(plan.queues)),
                ("devices", plan.devices),
                ("subgroups", any(g.subgroup for g in plan.gangs)),
                ("preemption", plan.preemption),
                ("consolidation", plan.consolidation),
                ("volumes", plan.volumes),
            )
            if present
        ]
        self.workload_nodes = [f"{namespace}-n{i}" for i in range(plan.nodes)]
        self.specs = {g.name: g for g in plan.gangs}
        self.capabilities = {
            queue_name(namespace, short): cpu_m for short, cpu_m in plan.queues if cpu_m
        }
        self.books = Books(
            self.scheduler,
            self.specs,
            self.workload_nodes,
            capabilities=self.capabilities,
            rival_node=f"{namespace}-rival",
        )
        self.deleted_nodes = self.books.deleted_nodes
        self.rival_node = f"{namespace}-rival"
        self.canary_node = f"{namespace}-canary"
        self.rival_bound = self.books.rival_bound
        self.chaos_deleted = self.books.chaos_deleted
        self.canaries: list[tuple[str, float]] = []  # (gang, t created)
        self.recovery = RECOVERY_SECONDS_SMALL if plan.small else RECOVERY_SECONDS
        self.waited: SchedulerWait | None = None  # from the last fault's end on
        self.observer: Observer | None = None
        self.replicas: Replicas | None = None
        self.devices: DeviceWatch | None = None
        self.volumes: Volumes | None = None

    def clock(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def say(self, text: str) -> None:
        with self.actions_log.open("a") as f:
            f.write(f"t={self.clock():8.2f} {text}\n")

    # setup and teardown

    def setup(self) -> None:
        self.result.scheduler_source = source_hash()
        self.say(f"plan {json.dumps(asdict(self.plan))}")
        self.say(f"t0 wall clock {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
        ok = self.api.create("/api/v1/namespaces", {"metadata": {"name": self.namespace}})
        if not ok:
            raise RuntimeError(f"namespace {self.namespace} could not be created")
        run = {RUN_LABEL: self.namespace}
        manifests = [
            node_manifest(
                FakeNode(n, {WORKLOAD_LABEL: self.namespace, **run}),
                cpu=f"{NODE_CPU_M}m",
                memory=f"{NODE_MEMORY_MI}Mi",
                pods=NODE_PODS,
            )
            for n in self.workload_nodes
        ]
        manifests.append(
            node_manifest(FakeNode(self.rival_node, {**run}), cpu="256", memory="1024Gi", pods=1000)
        )
        manifests.append(
            node_manifest(
                FakeNode(self.canary_node, {CANARY_LABEL: self.namespace, **run}),
                cpu="8",
                memory="32Gi",
                pods=NODE_PODS,
            )
        )
        with ThreadPoolExecutor(max_workers=6) as pool:
            created = list(pool.map(lambda m: self.api.create("/api/v1/nodes", m), manifests))
        if not all(created):
            raise RuntimeError("nodes could not be created")
        deadline = time.monotonic() + 60
        while True:
            response = self.api.retrying(
                "GET", "/api/v1/nodes", params={"labelSelector": f"{RUN_LABEL}={self.namespace}"}
            )
            items = response.json().get("items", []) if response is not None else []
            ready = sum(1 for n in items if is_ready(n))
            if ready >= len(manifests):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {ready} of {len(manifests)} nodes Ready after 60s")
            time.sleep(0.5)
        allocatable = {n: (NODE_CPU_M, NODE_MEMORY_MI, NODE_PODS) for n in self.workload_nodes}
        allocatable[self.canary_node] = (8000, 32 * 1024, NODE_PODS)
        self._create_cluster_wide()
        self._create_devices()
        self._create_volumes()
        self.observer = Observer(
            self.api,
            self.namespace,
            allocatable,
            self.t0,
            capabilities=self.capabilities,
            rival_node=self.rival_node,
        ).start()
        self.replicas = Replicas(
            self.directory,
            self.directory / "kubeconfig",
            self.logs,
            name=self.scheduler,
            namespace=self.namespace,
            ha=self.plan.mode == "ha",
            lease_seconds=self.plan.lease_seconds,
            clock=self.clock,
            consolidating=self.plan.consolidation,
            volume_bind_timeout=VOLUME_BIND_TIMEOUT if self.plan.volumes else None,
        )
        self.replicas.start_all()
        deadline = time.monotonic() + 45
        while not any("cache synced" in _read(r.log) for r in self.replicas.replicas):
            if time.monotonic() > deadline:
                raise RuntimeError("no scheduler replica synced its cache within 45s")
            self.replicas.supervise()
            time.sleep(0.3)
        if self.plan.mode == "ha":
            deadline = time.monotonic() + 30
            while self.leader() is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("no replica became leader within 30s")
                time.sleep(0.3)
        self.result.setup_seconds = round(time.monotonic() - self.t0, 1)
        self.t0 = time.monotonic()  # the plan's clock starts now
        self.observer.t0 = self.t0
        if self.volumes is not None:
            self.volumes.watch.t0 = self.t0
        self.say("schedulers up; the plan's clock starts")

    def _create_cluster_wide(self) -> None:
        """The run's Queues and its preemptors' PriorityClass, labelled for clean-up."""
        for queue in queue_objects(self.plan, self.namespace):
            if not self.api.create("/apis/scheduling.volcano.sh/v1beta1/queues", queue):
                raise RuntimeError(f"queue {queue['metadata']['name']} could not be created")
        if self.plan.preemption:
            high = {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {
                    "name": high_priority_class(self.namespace),
                    "labels": {RUN_LABEL: self.namespace},
                },
                "value": HIGH_PRIORITY,
            }
            if not self.api.create("/apis/scheduling.k8s.io/v1/priorityclasses", high):
                raise RuntimeError("the run's PriorityClass could not be created")

    def _create_devices(self) -> None:
        for path, obj in device_objects(self.plan, self.namespace, self.workload_nodes):
            if not self.api.create(path, obj):
                raise RuntimeError(f"{obj['kind']} {obj['metadata']['name']} was not created")
        if self.plan.devices:
            self.devices = DeviceWatch(self.api, self.namespace).start()

    def _create_volumes(self) -> None:
        if not self.plan.volumes:
            return
        made = class_object(self.namespace, {RUN_LABEL: self.namespace})
        if not self.api.create("/apis/storage.k8s.io/v1/storageclasses", made):
            raise RuntimeError("the run's StorageClass could not be created")
        rest = Rest(self.api.client, timeout=HTTP_TIMEOUT)
        self.volumes = Volumes(
            rest,
            self.api.kubeconfig,
            self.namespace,
            self.t0,
            seed=self.plan.seed,
            bind_timeout=VOLUME_BIND_TIMEOUT,
        )
        self.volumes.start()

    def teardown(self) -> None:
        if self.replicas is not None:
            self.replicas.stop_all()
        if self.observer is not None:
            self.observer.stop()
        if self.devices is not None:
            self.devices.stop()
        if self.volumes is not None:
            self.volumes.stop()
        ns = self.namespace
        with contextlib.suppress(Exception):
            self.api.retrying(
                "DELETE",
                f"/apis/batch/v1/namespaces/{ns}/jobs",
                within=15,
                params={"propagationPolicy": "Background"},
            )
        for _ in range(2):
            with contextlib.suppress(Exception):
                self.api.retrying(
                    "DELETE",
                    f"/api/v1/namespaces/{ns}/pods",
                    within=15,
                    params={"gracePeriodSeconds": "0"},
                )
            time.sleep(0.5)
        with contextlib.suppress(Exception):
            self.api.retrying(
                "DELETE",
                f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups",
                within=15,
            )
            self.api.retrying(
                "DELETE", "/api/v1/nodes", within=15, params={"labelSelector": f"{RUN_LABEL}={ns}"}
            )
            self.api.retrying("DELETE", f"/api/v1/namespaces/{ns}", within=15)
        with contextlib.suppress(Exception):
            self.api.retrying(
                "DELETE",
                "/apis/scheduling.volcano.sh/v1beta1/queues",
                within=15,
                params={"labelSelector": f"{RUN_LABEL}={ns}"},
            )
        with contextlib.suppress(Exception):
            self.api.retrying(
                "DELETE",
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                within=15,
                params={"labelSelector": f"{RUN_LABEL}={ns}"},
            )
        if self.volumes is not None:
            self.volumes.remove()
        with contextlib.suppress(Exception):  # made before a failure to start its provisioner
            self.api.retrying(
                "DELETE",
                "/apis/storage.k8s.io/v1/storageclasses",
                within=15,
                params={"labelSelector": f"{RUN_LABEL}={ns}"},
            )
        for kind in ("resourceslices", "deviceclasses"):
            with contextlib.suppress(Exception):
                self.api.retrying(
                    "DELETE",
                    f"/apis/resource.k8s.io/v1/{kind}",
                    within=15,
                    params={"labelSelector": f"{RUN_LABEL}={ns}"},
                )

    # the timeline

    def idle(self, seconds: float) -> None:
        """Wait, keeping the replicas running and collecting pods of deleted nodes (and,
        after a fault, looking at what waits on the scheduler)."""
        deadline = time.monotonic() + seconds
        while True:
            assert self.replicas is not None
            self.replicas.supervise()
            self.collect_orphans()
            if self.waited is not None and self.clock() - (self.waited.looked or 0.0) >= 0.5:
                self.look()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(0.25, left))

    def execute(self) -> None:
        actions: list[tuple[float, int, str, Any]] = []
        for i, at in enumerate(self.plan.waves):
            actions.append((at, 0, "wave", i))
        for fault in self.plan.faults:
            actions.append((fault.at, 1, "fault", fault))
        actions.sort(key=lambda a: (a[0], a[1]))
        last_fault_end = 0.0
        for at, _, what, arg in actions:
            self.idle(at - self.clock())
            if what == "wave":
                self.create_wave(arg)
            else:
                started = self.clock()
                detail = self.fault(arg)
                ended = self.clock()
                last_fault_end = ended
                # The scheduler's part of the recovery is timed from the last fault's end:
                # waves may come after it, and gangs bind while they do.
                self.waited = SchedulerWait(since=ended)
                self.result.faults.append(
                    {
                        "kind": arg.kind,
                        "planned_at": arg.at,
                        "started": started,
                        "ended": ended,
                        **detail,
                    }
                )
                self.say(f"fault {arg.kind} done: {detail}")
                self.create_canary()
        self.quiesce(last_fault_end)

    def create_wave(self, wave: int) -> None:
        objects = wave_objects(self.plan, wave, self.namespace, self.scheduler)
        self.say(f"wave {wave}: creating {len(objects)} objects")
        with ThreadPoolExecutor(max_workers=6) as pool:
            ok = list(pool.map(lambda po: self.api.create(po[0], po[1]), objects))
        if not all(ok):
            self.result.errors.append(f"wave {wave}: {ok.count(False)} objects not created")
        self.say(f"wave {wave} created")

    def create_canary(self) -> None:
        index = len(self.canaries)
        for pod in canary_pods(index, self.namespace, self.scheduler):
            if not self.api.create(f"/api/v1/namespaces/{self.namespace}/pods", pod):
                self.result.errors.append(f"canary {index} not created")
        self.canaries.append((f"canary-{index}", self.clock()))

    # faults

    def leader(self) -> Replica | None:
        assert self.replicas is not None
        if self.plan.mode != "ha":
            return self.replicas.replicas[0]
        response = self.api.retrying(
            "GET",
            f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.scheduler}",
            within=10,
        )
        if response is None or response.status_code != 200:
            return None
        holder = (response.json().get("spec") or {}).get("holderIdentity") or ""
        pid = holder.rsplit("_", 1)[-1]
        for replica in self.replicas.replicas:
            if replica.process is not None and str(replica.process.pid) == pid:
                return replica
        return None

    def fault(self, fault: FaultSpec) -> dict:
        assert self.replicas is not None
        assert self.observer is not None
        pick = random.Random(fault.param("pick", 0))
        kind = fault.kind
        self.say(f"fault {kind} {dict(fault.params)}")
        if kind in ("scheduler-kill", "leader-kill"):
            replica = self.leader() or pick.choice(self.replicas.replicas)
            old = replica.process.pid if replica.process else None
            self.replicas.kill(replica)
            return {"replica": replica.index, "pid": old}
        if kind == "leader-freeze":
            replica = self.leader() or pick.choice(self.replicas.replicas)
            pid = replica.process.pid if replica.process else None
            self.replicas.freeze(replica)
            self.idle(float(fault.param("seconds", 3.0)))
            self.replicas.thaw(replica)
            return {"replica": replica.index, "pid": pid, "seconds": fault.param("seconds")}
        if kind == "apiserver-restart":
            local_cluster.restart(
                self.directory,
                "kube-apiserver",
                down_seconds=float(fault.param("down", 0.0)),
                timeout=90,
            )
            return {"down": fault.param("down")}
        if kind == "etcd-restart":
            sig = getattr(signal, fault.param("signal", "SIGTERM"))
            local_cluster.restart(
                self.directory,
                "etcd",
                sig=sig,
                down_seconds=float(fault.param("down", 0.0)),
                timeout=60,
            )
            return {"signal": fault.param("signal"), "down": fault.param("down")}
        pods = self.observer.copy()
        ours = sorted(
            (
                p
                for p in pods.values()
                if p.alive and p.scheduler == self.scheduler and not p.gang.startswith("canary-")
            ),
            key=lambda p: p.name,
        )
        if kind == "rival-bind":
            return self.rival(pick, int(fault.param("count", 1)))
        if kind == "pod-delete":
            which = fault.param("which", "any")
            pool = [p for p in ours if (which == "any" or (which == "bound") == bool(p.node))]
            pool = pool or ours
            chosen = pick.sample(pool, min(len(pool), int(fault.param("count", 1))))
            for pod in chosen:
                self.chaos_deleted[pod.uid] = (self.clock(), bool(pod.node))
                self.api.retrying(
                    "DELETE", f"/api/v1/namespaces/{self.namespace}/pods/{pod.name}", within=5
                )
            return {"deleted": [(p.name, p.node or "pending") for p in chosen]}
        if kind == "node-delete":
            alive = [n for n in self.workload_nodes if n not in self.deleted_nodes]
            busy = sorted({p.node for p in ours if p.node in alive})
            node = pick.choice(busy or alive)
            self.deleted_nodes[node] = self.clock()
            self.api.retrying("DELETE", f"/api/v1/nodes/{node}", within=10)
            return {"node": node, "pods_on_it": sorted(p.name for p in ours if p.node == node)}
        raise ValueError(f"unknown fault {kind}")

    def rival(self, pick: random.Random, count: int, *, within: float = 3.0) -> dict:
        """Another client binding our pending pods (gang members first) to the rival node, as
        soon as it sees them, for up to ``within`` seconds or until ``count`` binds took."""
        assert self.observer is not None
        deadline = time.monotonic() + within
        tried: dict[str, int] = {}
        bound: list[str] = []
        while len(bound) < count and time.monotonic() < deadline:
            pending = sorted(
                (p for p in self.observer.copy().values()
                 if p.alive and not p.node and p.scheduler == self.scheduler
                 and not p.gang.startswith("canary-") and p.name not in tried),
                key=lambda p: p.name,
            )  # fmt: skip
            members = [p for p in pending if not p.gang.startswith(SINGLE)] or pending
            if not members:
                time.sleep(0.05)
                continue
            pod = pick.choice(members)
            body = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": pod.name, "namespace": self.namespace},
                "target": {"apiVersion": "v1", "kind": "Node", "name": self.rival_node},
            }
            response = self.api.retrying(
                "POST",
                f"/api/v1/namespaces/{self.namespace}/pods/{pod.name}/binding",
                body=body,
                within=5,
            )
            tried[pod.name] = response.status_code if response is not None else 0
            if tried[pod.name] == 201:
                self.rival_bound[pod.name] = self.clock()
                bound.append(pod.name)
        return {"tried": tried, "bound": bound}

    def collect_orphans(self) -> None:
        """What the pod GC controller does: pods bound to a node that is gone are deleted
        (force: no kubelet will ever confirm), a couple of seconds after the node went."""
        if not self.deleted_nodes or self.observer is None:
            return
        now = self.clock()
        for pod in self.observer.copy().values():
            went = self.deleted_nodes.get(pod.node)
            if went is None or pod.gone or now - went < 2.0 or pod.uid in self.chaos_deleted:
                continue
            self.chaos_deleted[pod.uid] = (now, True)
            self.say(f"pod GC: {pod.name} on deleted node {pod.node}")
            self.api.retrying(
                "DELETE",
                f"/api/v1/namespaces/{self.namespace}/pods/{pod.name}",
                within=5,
                params={"gracePeriodSeconds": "0"},
            )

    # the end

    def look(self) -> tuple[dict[str, PodState], dict[str, list[PodState]]]:
        """The pods as observed and the gangs that should be bound, looked at for the
        scheduler's part of the recovery."""
        assert self.observer is not None
        pods = self.with_volumes_made(self.observer.copy())
        expected, _, _ = expectations(self.books, pods)
        if self.waited is not None:
            self.waited.look(expected, pods, self.books, now=self.clock())
        return pods, expected

    def with_volumes_made(self, pods: dict[str, PodState]) -> dict[str, PodState]:
        """The pods, each with a scratch volume counted as having its claims made only once
        the ephemeral volume controller made that claim for it too (until then no scheduler
        can place it)."""
        if self.volumes is None:
            return pods
        claims = self.volumes.watch.copy()
        late = binding_late(claims, self.volumes.claims_with_volumes())
        for pod in pods.values():
            if not pod.scratch:
                continue
            claim = made_for(claims, pod.scratch, pod.uid)
            if pod.claimed_t is not None:
                pod.claimed_t = None if claim is None else max(pod.claimed_t, claim.seen_t)
            if claim is not None and claim.uid in late and not pod.node:
                pod.claimed_t = None  # its volume is made: the PV controller's to bind
            if claim is not None and claim.volume and not pod.node:
                # A volume made where a gang was meant to go (its node deleted since, or
                # its room taken) holds the pod there: the first fit must know.
                pod.pinned = self.volumes.node_of(claim.volume)
        return pods

    def quiesce(self, last_fault_end: float) -> None:
        assert self.observer is not None
        assert self.replicas is not None
        deadline = last_fault_end + self.recovery
        recovered_at: float | None = None
        said_at = last_fault_end
        if self.waited is None:  # a plan without faults
            self.waited = SchedulerWait(since=last_fault_end)
        waited = self.waited
        while True:
            self.replicas.supervise()
            self.collect_orphans()
            pods, expected = self.look()
            canaries_pending = [g for g, _ in self.canaries if not _gang_bound(pods, g)]
            now = self.clock()
            if expected and now - said_at >= WAITING_SAID_EVERY:
                self.say(still_waiting(expected, since=last_fault_end, now=now))
                said_at = now
            # A victim set left short (a leader fault cut it) is finished by the next leader
            # once its marks are RESEND_SECONDS old: waited for, or I10 would be counted
            # before it could be.
            short = victim_sets_short(self.books, pods, now=now)
            if not expected and not canaries_pending and not short:
                recovered_at = recovered_at if recovered_at is not None else now
                quiet = time.monotonic() - self.observer.last_bind
                if quiet >= SETTLE_SECONDS and now >= last_fault_end + SETTLE_SECONDS:
                    break
            else:
                recovered_at = None
            if now > deadline:
                break
            time.sleep(0.5)
        if recovered_at is not None:
            self.result.recovery_seconds = round(max(0.0, recovered_at - last_fault_end), 2)
        self.result.scheduler_recovery_seconds = waited.finish(now=self.clock())
        self.say(
            f"quiescent (recovered at {recovered_at}; the scheduler's longest wait "
            f"{self.result.scheduler_recovery_seconds}s, {waited.waits}); checking"
        )

    def check(self) -> None:
        assert self.observer is not None
        pods = self.with_volumes_made(self.observer.copy())
        with self.observer.lock:
            events = list(self.observer.events)
            seen = list(self.observer.violations)
        violations: list[Violation] = seen
        leader_faults = [
            (f["started"], f["ended"])
            for f in self.result.faults
            if f["kind"] in ("scheduler-kill", "leader-kill", "leader-freeze")
        ]
        outages = [
            (f["started"], f["ended"])
            for f in self.result.faults
            if f["kind"] in ("apiserver-restart", "etcd-restart")
        ]
        # In HA, an outage longer than the leader's renew deadline (its Lease less a 7.5th,
        # scheduler/operator.py) takes its Lease as a kill does: the binds it had in flight
        # are cut, and no replica leads until the store is back (seed 10046).
        renew_deadline = self.plan.lease_seconds * (1 - 1 / 7.5)
        lapses = [
            (start, end)
            for start, end in outages
            if self.plan.mode == "ha" and end - start >= renew_deadline
        ]
        violations += partial_incarnations(
            self.books,
            pods,
            events,
            leader_faults=leader_faults + lapses,
            lease_seconds=self.plan.lease_seconds,
        )
        takeovers = leader_faults + (outages if self.plan.mode == "ha" else [])
        violations += victims_below_minimum(
            self.books,
            pods,
            outages=outages,
            takeovers=takeovers,
            takeover_seconds=self.plan.lease_seconds + TAKEOVER_SECONDS,
        )
        if self.plan.preemption and not self.plan.queues:
            # Without queues nothing reclaims: every eviction is a preemptor's, and only the
            # preemptors have the high priority.
            violations += [
                Violation(
                    "I10",
                    f"pod {p.name} of priority {p.priority} preempted: no gang has a higher one",
                    {"pod": p.name, "gang": p.gang},
                )
                for p in pods.values()
                if p.evicted_t is not None and p.priority >= HIGH_PRIORITY
            ]
        self.result.evicted = sum(1 for p in pods.values() if p.evicted_t is not None)
        self.result.moved = sum(1 for p in pods.values() if p.moved)
        expected, incomplete, no_room = expectations(self.books, pods)
        # A gang whose pending members wait for the ResourceClaim controller to make their
        # claims cannot be bound by anyone: the controller's lag, reported by name (seed
        # 5017: kube-controller-manager's pod informer stalled after an API server restart,
        # its claims made 40-70 s late), not I4.
        made = made_ready(expected, self.books)
        self.result.claims_not_made = sorted(g for g in expected if g not in made)
        for gang, pending in expected.items():
            if gang not in made:
                continue
            members = [p for p in pods.values() if p.gang == gang and p.scheduler == self.scheduler]
            violations.append(
                Violation(
                    "I4",
                    f"gang {gang} not bound {self.recovery:.0f}s after the last fault: "
                    f"{len(pending)} live members pending, "
                    f"{sum(1 for p in members if p.node and p.alive)} live bound",
                    {
                        "gang": gang,
                        "pending": sorted(p.name for p in pending),
                        "spec": asdict(self.specs[gang]) if gang in self.specs else None,
                    },
                )
            )
        for gang, created in self.canaries:
            bound = [p.bound_t for p in pods.values() if p.gang == gang and p.bound_t is not None]
            if len(bound) < 2:
                violations.append(
                    Violation(
                        "I5",
                        f"canary {gang} (created t={created}) not bound",
                        {"gang": gang, "created": created},
                    )
                )
            else:
                latency = round(max(bound) - created, 2)
                self.result.canary_seconds.append(latency)
                # Later faults may overlap a canary's wait: the time since the last fault
                # that ended before it bound is the recovery proper.
                ends = [f["ended"] for f in self.result.faults if f["ended"] <= max(bound)]
                self.result.canary_recovery_seconds.append(round(max(bound) - max(ends), 2))
                if latency > self.recovery:
                    violations.append(
                        Violation("I5", f"canary {gang} bound after {latency}s", {"gang": gang})
                    )
        if self.volumes is not None:
            violations += self.check_volumes(pods)
        if self.devices is not None:
            violations += self.devices.violations()
            violations += self.devices.outliving(self.observer.copy)
            self.result.claims_allocated = len(self.devices.allocated)
            self.result.claims_controller_lag = self.devices.controller_lag
        self.result.incomplete_gangs = incomplete
        self.result.no_room = no_room
        self.result.relists = self.observer.relists
        for v in violations:
            v.details["scheduler_log"] = self.log_excerpt(v)
            if v.invariant == "I4" and v.details.get("gang"):
                v.details["explain"] = self.explain(v.details["gang"])
                v.details["events"] = self.events_of(v.details.get("pending") or [])
            self.result.violations.append(
                {"invariant": v.invariant, "what": v.what, "details": v.details}
            )

    def leaderless(self) -> list[tuple[float, float]]:
        """The windows in which no replica could write (a leader killed or frozen, the API
        server or etcd away), each until a leader could act again: a takeover (the Lease's
        lapse, a sync) after a leader fault, or in HA an outage, which may cost the Lease."""
        takeover = self.plan.lease_seconds + TAKEOVER_SECONDS
        found = []
        for fault in self.result.faults:
            start, end = fault["started"], fault["ended"]
            if fault["kind"] in ("scheduler-kill", "leader-kill", "leader-freeze"):
                found.append((start, end + takeover))
            elif fault["kind"] in ("apiserver-restart", "etcd-restart"):
                found.append((start, end + (takeover if self.plan.mode == "ha" else 0.0)))
        return found

    def check_volumes(self, pods: dict[str, PodState]) -> list[Violation]:
        assert self.volumes is not None
        claims = self.volumes.watch.copy()
        mounting = [
            Mounting(p.name, p.uid, p.scratch, p.node, p.bound_rv, p.alive, p.bind_watched)
            for p in pods.values()
            if p.scratch and not p.gone
        ]
        found, unordered = volume_violations(
            mounting, claims, self.volumes.volumes(), rival_bound=self.rival_bound,
            now=self.volumes.watch.now(), in_flight=LEFTOVER_SECONDS, pauses=self.leaderless(),
        )  # fmt: skip
        self.result.volumes_bound = sum(1 for c in claims.values() if c.bound)
        self.result.volume_binds_unordered = unordered
        self.result.provisioner_errors = self.volumes.provisioner.errors[-10:]
        with self.volumes.watch.lock:
            found = [*self.volumes.watch.violations, *found]
        return [Violation(v.invariant, v.what, v.details) for v in found]

    def explain(self, gang: str) -> list[str]:
        """What ``gang-scheduler explain`` says of a gang left unbound, computed afresh on
        the cluster as it is at the check: if it would bind now, the scheduler's own state
        kept it waiting (a missed wake-up), else the cluster does (seed 30092)."""
        argv = [
            sys.executable,
            "-m",
            "scheduler",
            "explain",
            f"{self.namespace}/{gang}",
            "--kubeconfig",
            str(self.directory / "kubeconfig"),
            "--scheduler-name",
            self.scheduler,
        ]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        except subprocess.TimeoutExpired:
            return ["explain timed out after 60s"]
        return (done.stdout + done.stderr).splitlines()[:60]

    def events_of(self, pods: Sequence[str]) -> list[str]:
        """The Events the live scheduler wrote of ``pods`` (the last few, oldest first):
        what it, not a fresh pass, thought kept them waiting."""
        response = self.api.retrying(
            "GET", f"/apis/events.k8s.io/v1/namespaces/{self.namespace}/events", within=10.0
        )
        if response is None or response.status_code != 200:
            return [f"events not read: {response.status_code if response else 'no answer'}"]
        wanted = set(pods)
        found = []
        for event in response.json().get("items") or []:
            regarding = event.get("regarding") or {}
            if regarding.get("kind") == "Pod" and regarding.get("name") in wanted:
                when = event.get("eventTime") or (event.get("metadata") or {}).get(
                    "creationTimestamp", ""
                )
                count = (event.get("series") or {}).get("count", 1)
                found.append(
                    (when, f"{when} {regarding['name']} {event.get('reason')} x{count}: "
                           f"{(event.get('note') or '')[:300]}")
                )  # fmt: skip
        return [line for _, line in sorted(found)][-12:]

    def log_excerpt(self, violation: Violation) -> list[str]:
        assert self.replicas is not None
        needle = violation.details.get("gang") or violation.details.get("node") or ""
        if not needle:
            return []
        lines = []
        for replica in self.replicas.replicas:
            for line in _read(replica.log).splitlines():
                if needle and (f"/{needle}" in line or f"{needle}-" in line or "=== chaos" in line):
                    lines.append(f"[{replica.index}] {line[:300]}")
        return lines[-40:]


# -- the invariants judged on what the observer saw ------------------------------------------


@dataclass
class Books:
    """What the run did that the checker judges by: whose pods, the gangs as planned, the
    nodes, and what the chaos itself did (rival binds, deleted nodes and pods)."""

    scheduler: str
    specs: dict[str, GangSpec]
    workload_nodes: list[str]
    deleted_nodes: dict[str, float] = field(default_factory=dict)  # node -> t
    rival_bound: dict[str, float] = field(default_factory=dict)  # pod name -> t
    chaos_deleted: dict[str, tuple[float, bool]] = field(default_factory=dict)  # uid -> (t, bound)
    capabilities: dict[str, int] = field(default_factory=dict)  # queue -> cpu m (I6)
    rival_node: str = ""


def still_waiting(expected: dict[str, list[PodState]], *, since: float, now: float) -> str:
    """One line of the gangs that should be bound and are not, ``now - since`` seconds after
    the last fault: each with its pending members and when its newest one was created (a
    pod a controller made late waits for its controller, not for the scheduler)."""
    said = []
    for gang, pending in sorted(expected.items()):
        names = sorted(p.name for p in pending)
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        newest = max(p.created_t for p in pending)
        unclaimed = sum(1 for p in pending if p.claimed_t is None)
        claims = f"; {unclaimed} without their claims yet" if unclaimed else ""
        said.append(
            f"{gang} ({len(pending)} pending: {shown}; newest created t={newest:.2f}{claims})"
        )
    return f"{now - since:.1f}s after the last fault, not yet bound: " + "; ".join(said)


def made_ready(expected: dict[str, list[PodState]], books: Books) -> dict[str, float]:
    """Of the gangs that should be bound, those the scheduler alone now keeps waiting: every
    pending member of the gang and of its group's peers has its claims made. Each with when
    the last of those came to be (created, claims made) in the observer's time."""
    ready: dict[str, float] = {}
    for gang in expected:
        spec = books.specs.get(gang)
        members = [p for g in {gang, *(spec.group if spec else ())} for p in expected.get(g, [])]
        if all(p.claimed_t is not None for p in members):
            ready[gang] = max((p.claimed_t or 0.0 for p in members), default=0.0)
    return ready


@dataclass
class SchedulerWait:
    """How long gangs waited on the scheduler alone after the last fault (``since``): from
    the later of the fault's end, the moment the gang's last member and claims came to be,
    and the last look that did not find it ready (room freed meanwhile), to its last bind.
    The run's recovery also holds what controllers add (a Job's pods or a template's claims
    made late, seeds 5014 and 5017 of session 38); this is the scheduler's part of it."""

    since: float
    waiting: dict[str, tuple[float, frozenset[str]]] = field(default_factory=dict)
    waits: dict[str, float] = field(default_factory=dict)  # gang -> its longest wait
    looked: float | None = None

    def look(
        self,
        expected: dict[str, list[PodState]],
        pods: dict[str, PodState],
        books: Books,
        *,
        now: float,
    ) -> None:
        ready = made_ready(expected, books)
        for gang in [g for g in self.waiting if g not in ready]:
            began, uids = self.waiting.pop(gang)
            tracked = [pods[u] for u in uids if u in pods]
            bound = [p.bound_t for p in tracked if p.bound_t is not None]
            if bound and all(p.node or not p.alive for p in tracked):
                self.waits[gang] = max(self.waits.get(gang, 0.0), round(max(bound) - began, 2))
            # else it stopped being ready (a member went, room was taken): not a wait
        for gang, made in ready.items():
            uids = frozenset(p.uid for p in expected[gang])
            if gang in self.waiting:
                began, seen = self.waiting[gang]
                self.waiting[gang] = (began, seen | uids)
            else:
                unready = self.looked if self.looked is not None else self.since
                self.waiting[gang] = (max(self.since, made, unready), uids)
        self.looked = now

    def finish(self, *, now: float) -> float:
        """The longest wait; a gang still waiting counts until ``now``."""
        for gang, (began, _) in self.waiting.items():
            self.waits[gang] = max(self.waits.get(gang, 0.0), round(now - began, 2))
        return max(self.waits.values(), default=0.0)


def expectations(
    books: Books, pods: dict[str, PodState]
) -> tuple[dict[str, list[PodState]], list[str], list[str]]:
    """(gang -> its live pending pods that should be bound, incomplete gangs, gangs with
    no room): I4's rule."""
    by_gang: dict[str, list[PodState]] = defaultdict(list)
    for pod in pods.values():
        if pod.scheduler == books.scheduler and pod.alive:
            by_gang[pod.gang].append(pod)

    done = {
        gang: sum(1 for p in members if _succeeded_at(p, None))
        for gang, members in _succeeded(books, pods).items()
    }

    def complete(gang: str) -> bool:
        members = by_gang.get(gang, [])
        if any(p.node for p in members):
            return True
        spec = books.specs.get(gang)
        need = 2 if gang.startswith("canary-") else 1
        if spec is not None:
            need = max(spec.min, spec.total or 0)
        waiting = [p for p in members if not p.node]
        if spec is not None and spec.subgroup:  # its minimum in whole replicas
            whole = sum(
                1 for n in Counter(p.replica for p in waiting).values() if n >= spec.subgroup
            )
            return whole * spec.subgroup >= spec.min
        return len(waiting) + done.get(gang, 0) >= need  # members that Succeeded count

    expected: dict[str, list[PodState]] = {}
    incomplete: list[str] = []
    for gang, members in sorted(by_gang.items()):
        if gang.startswith("canary-"):
            continue
        pending = [p for p in members if not p.node]
        spec = books.specs.get(gang)
        whole = _in_whole_replicas(spec, members, pending)
        if len(whole) < len(pending):
            incomplete.append(gang)
        pending = whole
        if not pending:
            continue
        running = _running(spec, members, done.get(gang, 0))
        minimum = spec.min if spec is not None else 1
        peers = spec.group if spec else ()
        if running >= minimum:  # satisfied: the rest placed one by one
            expected[gang] = pending
        elif running and len(pending) >= minimum - running:
            # Below its minimum (a member the rival bound, members lost): the members it
            # lacks go together or not at all (seed 11307).
            expected[gang] = pending
        elif running:
            incomplete.append(gang)
        elif complete(gang) and all(complete(g) for g in peers):
            expected[gang] = pending
        else:
            incomplete.append(gang)
    no_room = _without_room(books, pods, expected)
    holders = _holders(books, by_gang, expected, no_room)
    if holders:
        held_out = _without_room(books, pods, expected, holders=holders)
        no_room += [g for g in held_out if g not in no_room]
    for gang in no_room:
        expected.pop(gang, None)
    held_back = _held_by_capability(books, pods, expected)
    for gang in held_back:
        expected.pop(gang)
    no_room.extend(held_back)
    return expected, incomplete, no_room


def _holders(
    books: Books,
    by_gang: dict[str, list[PodState]],
    expected: dict[str, list[PodState]],
    no_room: list[str],
) -> dict[str, list[PodState]]:
    """The NonStrict gangs that hold room unbound: none of their members bound, and not
    placed whole (too few members yet, or no room for all). Each with its pending members,
    which the scheduler holds where they fit until the rest does, or it times out."""
    found = {}
    for gang, members in by_gang.items():
        spec = books.specs.get(gang)
        if spec is None or spec.mode != "NonStrict" or any(p.node for p in members):
            continue
        if gang in expected and gang not in no_room:
            continue
        found[gang] = [p for p in members if not p.node]
    return found


def _queue_key(gang: str, members: list[PodState]) -> tuple:
    """The scheduler's queue order inside a queue: higher priority, then older, then name.
    The gang's age is its oldest pod's (a PodGroup made later makes it younger: never
    later in this order than the scheduler has it)."""
    return (
        -max((p.priority for p in members), default=0),
        min((p.created_t for p in members), default=0.0),
        gang,
    )


def _ahead(
    holder: str, group: list[str], holders: dict[str, list[PodState]],
    expected: dict[str, list[PodState]],
) -> bool:  # fmt: skip
    """Whether the scheduler may take ``holder``'s turn before ``group``'s: ahead of it in
    queue order, or in another queue (whose turn comes by fair share, which the checker
    does not model)."""
    members = holders[holder]
    if any(members[0].queue != expected[g][0].queue for g in group):
        return True
    return _queue_key(holder, members) < min(_queue_key(g, expected[g]) for g in group)


def _without_room(
    books: Books,
    pods: dict[str, PodState],
    expected: dict[str, list[PodState]],
    *,
    holders: dict[str, list[PodState]] | None = None,
) -> list[str]:
    """The expected gangs a first fit, biggest first (a GangGroup's gangs together), into
    what the surviving nodes have free cannot place. With ``holders``, each group first
    leaves what the NonStrict gangs ahead of it in the queue may hold: the scheduler takes
    those holds again at their turn and lets them go only for a gang ahead of them (seed
    7767: a single pod's only room was a NonStrict gang's hold, older than the pod)."""
    free = {}
    for node in books.workload_nodes:
        if node in books.deleted_nodes:
            continue
        free[node] = [NODE_CPU_M, NODE_MEMORY_MI, NODE_PODS, NODE_GPUS]
    for pod in pods.values():
        if pod.holds and pod.node in free:
            f = free[pod.node]
            f[0], f[1], f[2] = f[0] - pod.cpu_m, f[1] - pod.memory_mi, f[2] - 1
            f[3] -= pod.gpus
    # A GangGroup binds whole or not at all: its gangs are placed together, and if one has
    # no room none is expected (seed 7082: a group of gangs of 12, 2 and 12 with room for 23
    # pods; the first gang of 12 fitted alone and was expected, the group never could be).
    groups: list[list[str]] = []
    seen: set[str] = set()
    for gang in sorted(expected):
        if gang in seen:
            continue
        spec = books.specs.get(gang)
        group = [g for g in (spec.group if spec else ()) or (gang,) if g in expected]
        group = group if gang in group else [gang, *group]
        seen.update(group)
        groups.append(group)
    no_room: list[str] = []
    for group in sorted(groups, key=lambda gs: -sum(p.cpu_m for g in gs for p in expected[g])):
        trial = {node: list(f) for node, f in free.items()}
        for holder in sorted(holders or ()):
            if holder not in group and _ahead(holder, group, holders or {}, expected):
                for pod in (holders or {})[holder]:
                    _take(trial, pod)  # what fits is held; the rest waits
        members = sorted((p for g in group for p in expected[g]), key=lambda p: -p.cpu_m)
        spots = [_take(trial, pod) for pod in members]
        if None in spots:
            no_room.extend(group)
            continue
        for pod, node in zip(members, spots, strict=True):
            _take(free, pod, node=node)
    return no_room


def _take(free: dict[str, list[int]], pod: PodState, *, node: str | None = None) -> str | None:
    """Place ``pod`` on ``node``, or on the first node with room for it (for a pod whose
    volume was made on a node, that node or none); where, or None."""
    spot = node or next(
        (
            n
            for n in ([pod.pinned] if pod.pinned else free)
            if (f := free.get(n)) is not None
            and f[0] >= pod.cpu_m
            and f[1] >= pod.memory_mi
            and f[2] >= 1
            and f[3] >= pod.gpus
        ),
        None,
    )
    if spot is None:
        return None
    f = free[spot]
    f[0], f[1], f[2], f[3] = f[0] - pod.cpu_m, f[1] - pod.memory_mi, f[2] - 1, f[3] - pod.gpus
    return spot


def _in_whole_replicas(
    spec: GangSpec | None, members: list[PodState], pending: list[PodState]
) -> list[PodState]:
    """The pending pods of a gang of subgroups (#23) in replicas that have all their members
    alive: a replica the chaos left short of its size can never be placed whole (I9)."""
    if spec is None or not spec.subgroup:
        return pending
    alive = Counter(p.replica for p in members)
    return [p for p in pending if alive[p.replica] >= spec.subgroup]


def _held_by_capability(
    books: Books, pods: dict[str, PodState], expected: dict[str, list[PodState]]
) -> list[str]:
    """The expected gangs their queue's capability holds back (#22): they wait by design,
    whatever is free. A gang needs its minimum under the capability, a satisfied one (placed
    one by one) its smallest pending member. What the rival bound counts: those pods are the
    scheduler's (by schedulerName) and hold their queue's room (seed 101: a member the rival
    bound took the last of the capability, and its gang's last member rightly waited)."""
    held: dict[str, int] = defaultdict(int)
    for pod in pods.values():
        if pod.holds and pod.queue in books.capabilities:
            held[pod.queue] += pod.cpu_m
    done = {
        gang: sum(1 for p in members if _succeeded_at(p, None))
        for gang, members in _succeeded(books, pods).items()
    }
    asked: dict[str, int] = {}  # per gang: what it needs of its queue before it binds
    for gang, pending in expected.items():
        spec = books.specs.get(gang)
        members = [p for p in pods.values() if p.gang == gang and p.alive]
        running = _running(spec, members, done.get(gang, 0))
        sizes = sorted((p.cpu_m for p in pending), reverse=True)
        # A running gang of subgroups takes a further replica whole, not one member (seed
        # 53014: one member fitted under the capability, a replica of four did not); one
        # below its minimum the members it lacks, together (seed 11307: a member the rival
        # bound, ten more needed at once, over the capability).
        one = spec.subgroup if spec is not None and spec.subgroup else 1
        minimum = spec.min if spec is not None else len(sizes)
        lacks = minimum - running
        if spec is not None and spec.subgroup and running < minimum:
            # Below its minimum, it lacks whole replicas: a replica the chaos left short counts
            # for none (seed 11520: 3 of a replica of 4 bound, the 4th deleted with its node;
            # the next replica of 4 did not fit under the capability, one member would have).
            whole = sum(
                1
                for n in Counter(p.replica for p in members if p.node).values()
                if n >= spec.subgroup
            )
            lacks = max(minimum // spec.subgroup - whole, 0) * spec.subgroup
        asked[gang] = sum(sizes[-one:]) if running >= minimum else sum(sizes[:lacks])
    back = []
    for gang, pending in expected.items():
        queue = pending[0].queue
        if queue not in books.capabilities:
            continue
        # A GangGroup binds whole: its unsatisfied gangs of the queue need their room at once
        # (seed 30090: three gangs that fit one by one, not together).
        spec = books.specs.get(gang)
        group = [g for g in (spec.group if spec else ()) or (gang,) if g in expected]
        together = sum(asked[g] for g in group if expected[g][0].queue == queue)
        if held[queue] + max(asked[gang], together) > books.capabilities[queue]:
            back.append(gang)
    return back


def _running(spec: GangSpec | None, members: list[PodState], done: int) -> int:
    """What counts toward a gang's minimum now, as the scheduler counts it: its live
    members bound (by anyone: the rival's binds too) and those that Succeeded in places
    no live member takes."""
    bound = sum(1 for p in members if p.node and p.alive)
    return bound + _counted(spec, done, len(members))


def _succeeded_at(pod: PodState, t: float | None) -> bool:
    """Whether ``pod`` had Succeeded by ``t`` (at the end for None) and still counts toward
    its gang's minimum then: a Job's pod counts as long as its Job counts it, deleted or not
    (status.succeeded, which the scheduler reads: seed 6067, a Job's pod that Succeeded and
    went with its node); any other only while it is still there, as no scheduler sees one
    deleted. This matches the scheduler's count for the harness's Jobs (parallelism equal to
    completions, one Job a gang, never made anew), where the completions left are the Job's
    pods not yet succeeded; it is more lenient than the scheduler from the moment the pod
    ended until the Job's status says so."""
    if pod.phase != "Succeeded" or pod.ended_t is None:
        return False
    if pod.job:
        return t is None or pod.ended_t <= t
    if t is None:
        return not pod.gone
    return pod.ended_t <= t and (pod.gone_t is None or pod.gone_t > t)


def _succeeded(books: Books, pods: dict[str, PodState]) -> dict[str, list[PodState]]:
    """By gang, the scheduler's members that Succeeded (``_succeeded_at`` says when they
    count)."""
    found: dict[str, list[PodState]] = defaultdict(list)
    for pod in pods.values():
        if pod.scheduler == books.scheduler and pod.phase == "Succeeded":
            found[pod.gang].append(pod)
    return found


def _counted(spec: GangSpec | None, done: int, live: int) -> int:
    """How many of ``done`` Succeeded members count toward the minimum beside ``live``
    ones: only in the places of the gang's total that no live member takes, as the
    scheduler counts them (``Gang.completed``)."""
    if spec is None:
        return done
    return min(done, max((spec.total or spec.min) - live, 0))


def _completed_by_next(
    inc: dict,
    nxt: dict | None,
    pods: dict[str, PodState],
    books: Books,
    *,
    deleted: Sequence[float] = (),
) -> bool:
    """Whether an incarnation cut short (fewer than its minimum bound: a leader killed
    mid-gang) was completed by the next one: every member it bound Succeeded before the next
    began, and the next one's binds with those reach the minimum (members that Succeeded
    count toward it: chaos seed 5035, where they ran to completion before a new leader could
    take the Lease). Pending members the chaos deleted around the next one's binds
    (``deleted``: when, for the gang) count as bound by it, as I1 excuses them (seed 11026:
    the next leader placed the 10 members left, 2 of them deleted as it bound them)."""
    if nxt is None:
        return False
    spec = books.specs.get(pods[inc["bound"][0]].gang)
    minimum = spec.min if spec else 1
    mine = [pods[u] for u in inc["bound"]]
    if not all(_succeeded_at(p, nxt["start"]) for p in mine):
        return False
    theirs = [u for u in nxt["bound"] if pods[u].name not in books.rival_bound]
    lost = sum(
        1 for t in deleted if nxt["start"] - EXCUSE_BEFORE <= t <= nxt["last_bind"] + EXCUSE_AFTER
    )
    return len(theirs) + len(mine) + lost >= minimum


def _incarnations(
    books: Books, pods: dict[str, PodState], events: list[tuple[float, str, str]]
) -> dict[str, list[dict]]:
    """Each gang's incarnations (start, end, bound, last_bind) from the bind and end
    events: one lasts while a member it bound is alive; two less than MERGE_GAP apart are
    one."""
    live: Counter[str] = Counter()
    incarnations: dict[str, list[dict]] = defaultdict(list)
    for t, kind, uid in events:
        pod = pods[uid]
        if pod.scheduler != books.scheduler or pod.gang.startswith(SINGLE):
            continue
        gang = pod.gang
        if kind == "bound":
            history = incarnations[gang]
            if live[gang] == 0:
                last = history[-1] if history else None
                if last is None or last["end"] is None or t - last["end"] >= MERGE_GAP:
                    history.append({"start": t, "end": None, "bound": [], "last_bind": t})
                else:
                    last["end"] = None
            current = history[-1]
            current["bound"].append(uid)
            current["last_bind"] = t
            live[gang] += 1  # its "ended" event, if any, comes after this one
        elif kind == "ended" and live[gang] > 0:
            live[gang] -= 1
            if live[gang] == 0:
                incarnations[gang][-1]["end"] = t
    return incarnations


# A scheduler that takes over a gang cut short needs at least this long past a Lease's
# lapse (or a restart) to act on it: a try at the Lease, a list of the cluster and a pass.
TAKEOVER_SECONDS = 2.0


def _ended_before_takeover(
    inc: dict,
    pods: dict[str, PodState],
    books: Books,
    *,
    leader_faults: Sequence[tuple[float, float]],
    lease_seconds: float,
) -> bool:
    """Whether an incarnation cut short by a leader fault (a kill or a freeze between its
    binds) was ended by the chaos before a scheduler could complete it: a bound member's
    node deleted (its pods go with it) sooner than a Lease lapses and a standby acts."""
    cut = [
        (start, end)
        for start, end in leader_faults
        if inc["start"] - EXCUSE_BEFORE <= start <= inc["last_bind"] + EXCUSE_AFTER
    ]
    deleted = [
        books.deleted_nodes[pods[u].node]
        for u in inc["bound"]
        if pods[u].node in books.deleted_nodes
    ]
    return any(
        start <= t <= end + lease_seconds + TAKEOVER_SECONDS for start, end in cut for t in deleted
    )


def _live(gang: str, pods: dict[str, PodState], books: Books) -> int:
    """The gang's members of ours alive now, bound or not."""
    return sum(
        1 for p in pods.values() if p.gang == gang and p.scheduler == books.scheduler and p.alive
    )


def _replicas_lost_before_takeover(
    inc: dict,
    short: list[str],
    pods: dict[str, PodState],
    books: Books,
    *,
    leader_faults: Sequence[tuple[float, float]],
    lease_seconds: float,
) -> bool:
    """Whether every replica left short in an incarnation cut by a leader fault (a kill or
    a freeze between its binds) lost a member it had bound to the chaos (the pod deleted,
    or its node) before a scheduler could complete it, and was given none after: such a
    replica can never be whole again (seed 8608: two replicas cut at 1 and 2 of 3, a bound
    member of each deleted 3 s later, before the restarted scheduler's first pass). A gang
    of no replicas is the replica "" (seed 12172)."""
    cuts = [
        (start, end)
        for start, end in leader_faults
        if inc["start"] - EXCUSE_BEFORE <= start <= inc["last_bind"] + EXCUSE_AFTER
    ]
    if not cuts:
        return False

    def lost(uid: str) -> float | None:
        t, was_bound = books.chaos_deleted.get(uid, (None, False))
        return t if was_bound else books.deleted_nodes.get(pods[uid].node)

    for replica in short:
        mine = [
            u
            for u in inc["bound"]
            if pods[u].replica == replica and pods[u].name not in books.rival_bound
        ]
        if not any(
            t is not None
            and any(start <= t <= end + lease_seconds + TAKEOVER_SECONDS for start, end in cuts)
            and all((pods[v].bound_t or 0.0) <= t for v in mine)
            for t in map(lost, mine)
        ):
            return False
    return True


def partial_incarnations(
    books: Books,
    pods: dict[str, PodState],
    events: list[tuple[float, str, str]],
    *,
    leader_faults: Sequence[tuple[float, float]] = (),
    lease_seconds: float = 0.0,
) -> list[Violation]:
    """I1 and I9, from the bind and end events in etcd order. ``leader_faults``: when a
    scheduler was killed or frozen, each (start, end); ``lease_seconds``: its Lease's."""
    incarnations = _incarnations(books, pods, events)
    succeeded = _succeeded(books, pods)
    violations = []
    deleted_by_gang: dict[str, list[float]] = defaultdict(list)
    for uid, (t, was_bound) in books.chaos_deleted.items():
        if uid in pods and not was_bound:
            deleted_by_gang[pods[uid].gang].append(t)
    for gang, history in incarnations.items():
        spec = books.specs.get(gang)
        minimum = spec.min if spec else (2 if gang.startswith("canary-") else 1)
        for i, inc in enumerate(history):
            ours = [u for u in inc["bound"] if pods[u].name not in books.rival_bound]
            replicas = Counter(pods[u].replica for u in ours)
            size = spec.subgroup if spec else 0
            short = sorted(r for r, n in replicas.items() if n < size)
            # Members that had Succeeded when it began count toward the minimum.
            done = sum(1 for p in succeeded.get(gang, ()) if _succeeded_at(p, inc["start"]))
            done = _counted(spec, done, len(ours))
            if len(ours) + done >= minimum and not short:
                continue
            nxt = history[i + 1] if i + 1 < len(history) else None
            if not short and _completed_by_next(
                inc, nxt, pods, books, deleted=deleted_by_gang.get(gang, [])
            ):
                continue  # cut short, its members finished, the rest bound counting them
            rival = [pods[u].name for u in inc["bound"] if pods[u].name in books.rival_bound]
            if rival:
                continue
            window = (inc["start"] - EXCUSE_BEFORE, inc["last_bind"] + EXCUSE_AFTER)
            if any(window[0] <= t <= window[1] for t in deleted_by_gang.get(gang, [])):
                continue
            if _ended_before_takeover(
                inc, pods, books, leader_faults=leader_faults, lease_seconds=lease_seconds
            ):
                continue  # seed 7779: a leader killed between binds, their node deleted meanwhile
            if len(ours) + done >= minimum and _replicas_lost_before_takeover(
                inc, short, pods, books, leader_faults=leader_faults, lease_seconds=lease_seconds
            ):
                continue  # seed 8608: cut between binds, then a bound member deleted
            if (
                not short
                and _live(gang, pods, books) + done < minimum
                and _replicas_lost_before_takeover(
                    inc,
                    [""],
                    pods,
                    books,
                    leader_faults=leader_faults,
                    lease_seconds=lease_seconds,
                )
            ):
                continue  # seed 12172: the same for a gang of no replicas, never whole again
            members = sorted(
                (p for p in pods.values() if p.gang == gang and p.scheduler == books.scheduler),
                key=lambda p: p.created_t,
            )
            if len(ours) >= minimum:
                invariant, what = (
                    "I9",
                    (
                        f"gang {gang}: an incarnation with replica(s) {', '.join(short)} partly "
                        f"bound ({', '.join(f'{r}: {replicas[r]}' for r in short)} of "
                        f"{spec.subgroup if spec else 0}; t={inc['start']}..{inc['end']})"
                    ),
                )
            else:
                invariant, what = (
                    "I1",
                    (
                        f"{spec.mode if spec else 'Strict'} gang {gang}: an incarnation with "
                        f"{len(ours)} of min {minimum} members bound"
                        + (f" ({done} had Succeeded)" if done else "")
                        + f" (t={inc['start']}..{inc['end']})"
                    ),
                )
            violations.append(
                Violation(
                    invariant,
                    what,
                    {
                        "gang": gang,
                        "spec": asdict(spec) if spec else None,
                        "incarnation": {**inc, "bound": [pods[u].name for u in inc["bound"]]},
                        "replicas": dict(replicas),
                        "members": [
                            {
                                "name": p.name,
                                "node": p.node,
                                "phase": p.phase,
                                "created": p.created_t,
                                "bound": p.bound_t,
                                "ended": p.ended_t,
                                "gone": p.gone,
                                "job": p.job,
                            }
                            for p in members
                        ],
                    },
                )
            )
    return violations


# Evictions of one gang closer than this are one preemption's (its victims are marked and
# deleted by concurrent requests); its members are counted this long after the last.
EVICTION_SETTLE = 2.0


def victim_sets_short(books: Books, pods: dict[str, PodState], *, now: float) -> list[str]:
    """The gangs of ours with victims marked less than ``EVICTION_SETTLE`` ago (a set being
    sent), or less than ``RESEND_SECONDS`` and the settle ago whose unmarked members still
    running are fewer than the minimum: a set that may yet be finished (I10 counts them
    once it could have been)."""
    by_gang: dict[str, list[PodState]] = defaultdict(list)
    for pod in pods.values():
        if pod.scheduler == books.scheduler:
            by_gang[pod.gang].append(pod)
    short = []
    for gang, members in sorted(by_gang.items()):
        spec = books.specs.get(gang)
        marks = [p.evicted_t for p in members if p.evicted_t is not None]
        if spec is None or spec.kind == "job" or not marks:
            continue
        if now - max(marks) < EVICTION_SETTLE:
            short.append(gang)  # a set being sent: counted once it has settled
            continue
        if now - max(marks) > RESEND_SECONDS + 2 * EVICTION_SETTLE:
            continue
        running = sum(1 for p in members if p.holds and p.alive and p.evicted_t is None)
        if 0 < running < spec.min:
            short.append(gang)
    return short


def victims_below_minimum(
    books: Books,
    pods: dict[str, PodState],
    *,
    outages: Sequence[tuple[float, float]] = (),
    takeovers: Sequence[tuple[float, float]] = (),
    takeover_seconds: float = 0.0,
) -> list[Violation]:
    """I10: a preemption or a reclaim never leaves a victim gang running below its minimum:
    once the victims a pass chose are marked, what remains of the gang bound and alive is
    none or at least its minimum. Excused as I1 excuses: a member the rival bound or the
    chaos deleted, a member on a deleted node; a Job's gang (its pods come again). The
    count waits out an API server or etcd restart that overlaps the settle window
    (``outages``): the observer sees nothing meanwhile, and then sees late what had been
    marked before it (seed 7741: 5 of 22 members seen marked when the API server went, the
    other 17, marked as well, only at its relist). It also waits out a change of leader
    that overlaps it (``takeovers``: a leader killed or frozen, or in HA an outage that
    may cost the Lease), and ``takeover_seconds`` beyond, or until the marks are
    ``RESEND_SECONDS`` old: the next leader finishes a victim set its predecessor left
    half-sent then (seed 8035), whether the window ends before the set's last mark is
    seen or after (seed 9056)."""
    found: list[Violation] = []
    by_gang: dict[str, list[PodState]] = defaultdict(list)
    for pod in pods.values():
        if pod.scheduler == books.scheduler:
            by_gang[pod.gang].append(pod)
    for gang, members in sorted(by_gang.items()):
        spec = books.specs.get(gang)
        times = sorted(p.evicted_t for p in members if p.evicted_t is not None)
        if spec is None or spec.kind == "job" or not times:
            continue
        excused = any(
            p.uid in books.chaos_deleted or p.name in books.rival_bound
            or p.node in books.deleted_nodes
            for p in members
        )  # fmt: skip
        if excused:
            continue
        # Marks at most 2 s apart are one victim set: (its first mark, its last).
        sets: list[list[float]] = []
        for t in times:
            if sets and t - sets[-1][1] <= 2.0:
                sets[-1][1] = t
            else:
                sets.append([t, t])
        for first, end in sets:
            after = end + EVICTION_SETTLE
            windows = sorted(
                [(start, stop, False) for start, stop in outages]
                + [(start, stop, True) for start, stop in takeovers]
            )
            for start, stop, leader in windows:
                # The observer was blind in the window, or the leader changed in it: the
                # next one finishes the set once its marks are RESEND_SECONDS old. From the
                # set's first mark: the observer may see the last ones after a kill that cut
                # the set short (seed 9056: the last seen 12 ms after the kill's end), and the
                # first too (seeds 9076, 9114: 0.15 s after; a restarted scheduler takes ~2 s
                # to sync, so marks seen that soon after a kill are the killed one's).
                if start <= after and stop + EVICTION_SETTLE >= first:
                    later = max(stop + takeover_seconds, end + RESEND_SECONDS) if leader else stop
                    after = max(after, later + EVICTION_SETTLE)
            left = [
                p
                for p in members
                if p.bound_t is not None
                and p.bound_t <= after
                and (p.ended_t is None or p.ended_t > after)
                and (p.evicted_t is None or p.evicted_t > after)
            ]
            if 0 < len(left) < spec.min:
                found.append(
                    Violation(
                        "I10",
                        f"gang {gang} left with {len(left)} of its minimum {spec.min} running "
                        f"after victims of it were evicted (t={end:.2f})",
                        {"gang": gang, "left": sorted(p.name for p in left)},
                    )
                )
    return found


def _gang_bound(pods: dict[str, PodState], gang: str) -> bool:
    return sum(1 for p in pods.values() if p.gang == gang and p.node) >= 2


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def run_once(directory: Path, seed: int, *, small: bool, keep_logs: bool = False) -> RunResult:
    plan = make_plan(seed, small=small)
    namespace = f"chaos-{seed}-{os.urandom(2).hex()}"
    run = Run(directory, plan, namespace=namespace)
    started = time.monotonic()
    try:
        run.setup()
        run.execute()
        run.check()
    except Exception as error:  # a harness failure is reported, never hidden
        run.result.errors.append(f"{type(error).__name__}: {error}")
        run.say(traceback.format_exc())
    finally:
        if run.replicas is not None:
            run.result.scheduler_exits = run.replicas.exits
        run.teardown()
        run.result.wall_seconds = round(time.monotonic() - started, 1)
    if not run.result.violations and not run.result.errors and not keep_logs:
        for path in run.logs.iterdir():
            path.unlink()
        run.logs.rmdir()
        run.result.logs = ""
    return run.result


# -- many runs, and what they add up to ----------------------------------------------------------


def summarize(results: list[RunResult], *, base_seed: int, small: bool, wall: float) -> dict:
    faults = Counter(f["kind"] for r in results for f in r.faults)
    violations = [
        {
            "seed": r.seed,
            **v,
            "reproduce": f"python -m bench.chaos --runs 1 --seed {r.seed}"
            + (" --small" if small else ""),
        }
        for r in results
        for v in r.violations
    ]
    recoveries = [r.recovery_seconds for r in results if r.recovery_seconds is not None]
    canaries = [c for r in results for c in r.canary_seconds]
    canary_recoveries = [c for r in results for c in r.canary_recovery_seconds]
    worst_run = max(results, key=lambda r: r.recovery_seconds or 0.0, default=None)
    waits = [
        r.scheduler_recovery_seconds for r in results if r.scheduler_recovery_seconds is not None
    ]
    worst_wait = max(results, key=lambda r: r.scheduler_recovery_seconds or 0.0, default=None)
    return {
        "runs": len(results),
        "base_seed": base_seed,
        "small": small,
        "modes": dict(Counter(r.mode for r in results)),
        "pods": sum(r.pods for r in results),
        "device_runs": sum(1 for r in results if r.claims_allocated),
        "runs_with": dict(sorted(Counter(f for r in results for f in r.features).items())),
        "evicted": sum(r.evicted for r in results),
        "moved": sum(r.moved for r in results),
        "claims_allocated": sum(r.claims_allocated for r in results),
        "volumes_bound": sum(r.volumes_bound for r in results),
        "volume_binds_unordered": sum(r.volume_binds_unordered for r in results),
        "claims_not_made": {r.seed: r.claims_not_made for r in results if r.claims_not_made},
        "claims_controller_lag": {
            r.seed: r.claims_controller_lag for r in results if r.claims_controller_lag
        },
        "faults_by_kind": dict(sorted(faults.items())),
        "faults": sum(faults.values()),
        "violations": violations,
        "violations_by_invariant": dict(Counter(v["invariant"] for v in violations)),
        "runs_with_violations": sorted({v["seed"] for v in violations}),
        "errors": [{"seed": r.seed, "error": e} for r in results for e in r.errors],
        "worst_recovery_seconds": max(recoveries, default=None),
        "worst_recovery_seed": worst_run.seed if worst_run and recoveries else None,
        "median_recovery_seconds": sorted(recoveries)[len(recoveries) // 2] if recoveries else None,
        "worst_scheduler_recovery_seconds": max(waits, default=None),
        "worst_scheduler_recovery_seed": worst_wait.seed if worst_wait and waits else None,
        "median_scheduler_recovery_seconds": sorted(waits)[len(waits) // 2] if waits else None,
        "worst_canary_seconds": max(canaries, default=None),
        "median_canary_seconds": sorted(canaries)[len(canaries) // 2] if canaries else None,
        "worst_canary_recovery_seconds": max(canary_recoveries, default=None),
        "scheduler_exits": sum(len(r.scheduler_exits) for r in results),
        "scheduler_exits_unexpected": [
            {"seed": r.seed, **e} for r in results for e in r.scheduler_exits if not e["expected"]
        ],
        "wall_seconds_total": round(wall, 1),
        "wall_seconds_per_run": round(wall / len(results), 1) if results else None,
        "results": [asdict(r) for r in results],
    }


def markdown(summary: dict) -> str:
    lines = [
        "# Chaos runs (`make chaos`)",
        "",
        "Random workloads and faults on the local control plane; see `bench/chaos.py` for what "
        "a run does and exactly what each invariant checks.",
        "",
        f"- runs: {summary['runs']} (seeds {summary['base_seed']} to "
        f"{summary['base_seed'] + summary['runs'] - 1}{', small' if summary['small'] else ''}), "
        f"modes {summary['modes']}, {summary['pods']} pods in all; "
        f"{summary.get('device_runs', 0)} runs with pods claiming GPUs by DRA, "
        f"{summary.get('claims_allocated', 0)} claims allocated in all (left allocated by the "
        f"ResourceClaim controller for pods done or gone: {summary.get('claims_controller_lag')}; "
        "gangs whose claims it had not made by the check, excused from I4: "
        f"{summary.get('claims_not_made', {})})",
        f"- runs with each feature: {summary.get('runs_with', {})}; "
        f"claims bound to volumes made on their pods' nodes: {summary.get('volumes_bound', 0)} "
        f"(binds I11 could not order, first seen in a re-list: "
        f"{summary.get('volume_binds_unordered', 0)}); "
        f"pods evicted by a preemption or a reclaim, or moved by consolidation: "
        f"{summary.get('evicted', 0)} (moved: {summary.get('moved', 0)})",
        f"- faults: {summary['faults']}: "
        + ", ".join(f"{k} {v}" for k, v in summary["faults_by_kind"].items()),
        f"- violations: {len(summary['violations'])} "
        f"{summary['violations_by_invariant'] or ''} in runs {summary['runs_with_violations']}",
        f"- harness errors: {len(summary['errors'])}",
        f"- recovery (last fault's end to every gang bound): median "
        f"{summary['median_recovery_seconds']} s, worst {summary['worst_recovery_seconds']} s "
        f"(seed {summary['worst_recovery_seed']}); of which the scheduler's part (from when "
        "a gang's members and claims existed and it had room): median "
        f"{summary.get('median_scheduler_recovery_seconds')} s, worst "
        f"{summary.get('worst_scheduler_recovery_seconds')} s "
        f"(seed {summary.get('worst_scheduler_recovery_seed')})",
        f"- canary gangs (created after each fault, to bound): median "
        f"{summary['median_canary_seconds']} s, worst {summary['worst_canary_seconds']} s (faults "
        "that came meanwhile included); from the end of the last fault before it bound, worst "
        f"{summary.get('worst_canary_recovery_seconds')} s",
        f"- scheduler exits (restarted at once; a leader that lost its Lease exits by design): "
        f"{summary['scheduler_exits']}, other exits: "
        f"{len(summary.get('scheduler_exits_unexpected', []))}",
        f"- wall time: {summary['wall_seconds_total']} s, {summary['wall_seconds_per_run']} s "
        "per run",
        "",
    ]
    if summary["violations"]:
        lines += [
            "## Violations",
            "",
            *table(
                ["seed", "invariant", "what", "reproduce"],
                (
                    [v["seed"], v["invariant"], v["what"], f"`{v['reproduce']}`"]
                    for v in summary["violations"]
                ),
            ),
            "",
        ]
    if summary["errors"]:
        lines += ["## Harness errors", ""]
        lines += [f"- seed {e['seed']}: {e['error']}" for e in summary["errors"]]
        lines.append("")
    return "\n".join(lines)


def run_many(
    directory: Path,
    seeds: Iterable[int],
    *,
    small: bool,
    keep_logs: bool = False,
    on_result: Callable[[RunResult], None] | None = None,
) -> list[RunResult]:
    """Runs on one control plane of their own in ``directory``, always stopped afterwards."""
    local_cluster.down(directory)  # whatever a killed harness left behind
    results: list[RunResult] = []
    try:
        local_cluster.up(directory)
        for seed in seeds:
            result = run_once(directory, seed, small=small, keep_logs=keep_logs)
            results.append(result)
            if on_result is not None:
                on_result(result)
            plane = local_cluster.read_state(directory.resolve())
            down = [p.name for p in plane.processes if not p.alive()] if plane else ["all"]
            down = [n for n in down if n != "gang-scheduler-chaos"]
            if down:  # a fault left the control plane broken: start a fresh one
                result.errors.append(f"control plane processes down after the run: {down}")
                local_cluster.down(directory)
                local_cluster.up(directory)
    finally:
        local_cluster.down(directory)
    return results


def summary_line(result: RunResult) -> str:
    kinds = ",".join(f["kind"] for f in result.faults)
    status = (
        "ok"
        if not result.violations and not result.errors
        else (
            f"{len(result.violations)} violations "
            f"{dict(Counter(v['invariant'] for v in result.violations))}"
            f" {len(result.errors)} errors {result.errors[:2]}"
        )
    )
    return (
        f"seed {result.seed} [{result.mode}] {result.pods} pods, faults {kinds}: {status}; "
        f"recovery {result.recovery_seconds}s (the scheduler's part "
        f"{result.scheduler_recovery_seconds}s), canaries {result.canary_seconds}, "
        f"exits {len(result.scheduler_exits)}, {result.wall_seconds}s"
        + (f", {result.claims_allocated} claims allocated" if result.claims_allocated else "")
        + (f"; logs {result.logs}" if result.logs else "")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1, help="run i uses seed SEED+i")
    parser.add_argument("--small", action="store_true", help="small workloads, short windows")
    parser.add_argument("--dir", type=Path, default=CHAOS_DIR, help="the control plane's folder")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where chaos.{json,md} go")
    parser.add_argument("--keep-logs", action="store_true", help="keep the logs of clean runs")
    parser.add_argument("--plan", action="store_true", help="print the seed's plan and stop")
    args = parser.parse_args(argv)
    if args.plan:
        print(json.dumps(asdict(make_plan(args.seed, small=args.small)), indent=1))
        return 0
    started = time.monotonic()
    results: list[RunResult] = []

    def report(result: RunResult) -> None:
        results.append(result)
        print(summary_line(result), flush=True)
        so_far = summarize(
            results, base_seed=args.seed, small=args.small, wall=time.monotonic() - started
        )
        write("chaos", so_far, markdown(so_far), into=args.out)

    try:
        run_many(
            args.dir,
            range(args.seed, args.seed + args.runs),
            small=args.small,
            keep_logs=args.keep_logs,
            on_result=report,
        )
    except (local_cluster.ClusterError, KeyboardInterrupt) as error:
        print(f"chaos stopped: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    summary = summarize(
        results, base_seed=args.seed, small=args.small, wall=time.monotonic() - started
    )
    write("chaos", summary, markdown(summary), into=args.out, quiet=False)
    return 1 if summary["violations"] or summary["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
