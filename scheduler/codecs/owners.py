"""Gangs from owners: which owner gang a pod is in (from the pod alone), and how many members
each gang of an owner object needs (from the object).

The pod side reads the pod's controller reference and the labels its operator writes:
JobSet writes ``jobset.sigs.k8s.io/{jobset-name,replicatedjob-name,job-index}`` on the pods of
its Jobs, LeaderWorkerSet's pod webhook ``leaderworkerset.sigs.k8s.io/{name,group-index}``,
the MPI Operator ``training.kubeflow.org/{operator-name,job-name}`` on its launcher (a Job's
pod). The owner side reads each kind as its operator sizes its own PodGroup, where it makes
one (KubeRay: the head plus every worker group's desired replicas; the MPI Operator: the
workers plus the launcher, or ``schedulingPolicy.minAvailable``). A malformed value never
raises: it becomes an error naming the field, and the gang is reported invalid.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from scheduler.codecs.gangs import read_options, stated_options
from scheduler.codecs.quantities import MAX_AMOUNT, QUANTITY_RULE, quantity
from scheduler.codecs.shapes import MAX_COUNT, obj, objs, text, texts, whole
from scheduler.model import names
from scheduler.model.gangs import JobProgress, Owner
from scheduler.model.owners import Grouping, OwnerKey, OwnerKind, gang_name
from scheduler.model.pods import GangClaim, GangKey, GangSource
from scheduler.model.resources import CPU, MEMORY, PODS, Resources

_GROUPINGS = {g.value: g for g in Grouping}
# The annotations read_options reads, by prefix.
_OPTION_PREFIXES = (names.KOORD_PREFIX, names.OUR_PREFIX, "pod-group.scheduling.sigs.k8s.io/")
# The API groups of the owners whose pods point at them directly.
_DIRECT = {
    ("RayCluster", "ray.io"): OwnerKind.RAY_CLUSTER,
    ("MPIJob", "kubeflow.org"): OwnerKind.MPI_JOB,
    ("PyTorchJob", "kubeflow.org"): OwnerKind.PYTORCH_JOB,
}
INT32_MAX = 2**31 - 1
# A JobSet is a gang per replica: one with more replicas than this (hostile, or a mistake
# no JobSet controller could run) is an error rather than a pass that never ends.
MAX_REPLICAS = 10_000


def read_grouping(annotations: Mapping[str, str], errors: list[str]) -> Grouping | None:
    raw = annotations.get(names.OWNER_GANG)
    if raw is None:
        return None
    found = _GROUPINGS.get(raw.strip().lower())
    if found is None:
        errors.append(
            f"annotation {names.OWNER_GANG} must be one of "
            f"{', '.join(g.value for g in Grouping)}, got {raw!r}"
        )
    return found


def _controller(refs: object) -> tuple[str, str, str, str] | None:
    """The controller reference as (kind, API group, name, uid), or None."""
    for ref in objs(refs):
        if ref.get("controller") is True:
            group = text(ref.get("apiVersion")).rpartition("/")[0]
            return text(ref.get("kind")), group, text(ref.get("name")), text(ref.get("uid"))
    return None


def controlling_job(refs: object) -> tuple[str, str]:
    """The name and uid of the batch Job that controls an object, from its ownerReferences
    (("", "") for none)."""
    controller = _controller(refs)
    if controller is None or controller[:2] != ("Job", "batch"):
        return "", ""
    return controller[2], controller[3]


def read_owner_claim(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    refs: object,
    *,
    namespace: str,
) -> GangClaim | None:
    """The owner gang of a pod that declares no gang, or None: no owner that makes gangs,
    or ``gang-scheduler.io/owner-gang: none`` on the pod."""
    errors: list[str] = []
    grouping = read_grouping(annotations, errors)
    if grouping is Grouping.NONE:
        return None
    kind, group, name, _ = _controller(refs) or ("", "", "", "")
    part = ""
    if (
        labels.get(names.SPARK_LAUNCHED) == "true"
        and labels.get(names.SPARK_ROLE) in ("driver", "executor")
        and names.SPARK_APP_NAME in labels
    ):  # the driver (of its SparkApplication) and the executors (of their driver pod)
        owner = OwnerKey(namespace, OwnerKind.SPARK_APPLICATION, labels[names.SPARK_APP_NAME])
    elif kind == "StatefulSet" and names.LWS_NAME in labels and names.LWS_GROUP_INDEX in labels:
        owner = OwnerKey(namespace, OwnerKind.LEADER_WORKER_SET, labels[names.LWS_NAME])
        part = labels[names.LWS_GROUP_INDEX]
    elif kind == "Job" and group == "batch":
        if all(k in labels for k in (names.JOBSET_NAME, names.JOBSET_REPLICATED_JOB,
                                      names.JOBSET_JOB_INDEX)):  # fmt: skip
            owner = OwnerKey(namespace, OwnerKind.JOBSET, labels[names.JOBSET_NAME])
            part = f"{labels[names.JOBSET_REPLICATED_JOB]}-{labels[names.JOBSET_JOB_INDEX]}"
            if grouping is None and names.JOBSET_EXCLUSIVE in annotations:
                grouping = Grouping.REPLICA  # JobSet's exclusive placement: a gang per replica
        elif (
            labels.get(names.KUBEFLOW_OPERATOR) == "mpi-operator"
            and names.KUBEFLOW_JOB_NAME in labels
        ):
            owner = OwnerKey(namespace, OwnerKind.MPI_JOB, labels[names.KUBEFLOW_JOB_NAME])
        elif (
            names.JOB_COMPLETION_INDEX in labels
            or names.JOB_COMPLETION_INDEX in annotations
            or grouping is Grouping.WHOLE
        ):  # an Indexed Job's pod, or a NonIndexed one's that asks for its Job whole
            owner = OwnerKey(namespace, OwnerKind.JOB, name)
        else:  # a work queue's pod: alone, as before
            return None
    elif (kind, group) in _DIRECT:
        owner = OwnerKey(namespace, _DIRECT[kind, group], name)
    else:
        return None
    if not owner.name:
        return None
    # Most pods of a Job say nothing of gangs: their options are not read (for every pod
    # of every Job in the cluster, ours or not, that was half of the pod codec's time).
    stated: dict[str, Any] = {}
    if any(k.startswith(_OPTION_PREFIXES) for k in annotations):
        stated, stated_errors = stated_options(annotations, namespace=namespace)
        errors = [*stated_errors, *errors]
    return GangClaim(
        key=GangKey(namespace, gang_name(owner.kind, owner.name, part)),
        source=GangSource.OWNER,
        owner=owner,
        part=part,
        grouping=grouping,
        errors=tuple(errors),
        **stated,
    )


# -- the owner objects ---------------------------------------------------------------------


def _count(raw: object, default: int, field: str, errors: list[str], *, low: int = 0) -> int:
    if raw is None:
        return default
    value = whole(raw)
    if value is None or not low <= value <= INT32_MAX:
        errors.append(f"{field} must be a whole number from {low} to {INT32_MAX}, got {raw!r}")
        return default
    return value


def _job_pods(spec: Mapping[str, Any], field: str, errors: list[str]) -> int:
    """How many pods of a Job run at once: parallelism, at most completions (at least 1)."""
    parallelism = _count(spec.get("parallelism"), 1, f"{field}.parallelism", errors)
    completions = spec.get("completions")
    if completions is not None:
        parallelism = min(parallelism, _count(completions, 1, f"{field}.completions", errors))
    return max(parallelism, 1)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def owner_from_dict(kind: OwnerKind, raw: object) -> Owner:
    """An owner object of ``kind`` as the gangs it makes."""
    body = obj(raw)
    meta, spec = obj(body.get("metadata")), obj(body.get("spec"))
    namespace = text(meta.get("namespace"), "default")
    key = OwnerKey(namespace, kind, text(meta.get("name")))
    annotations = texts(meta.get("annotations"))
    labels = texts(meta.get("labels"))
    errors: list[str] = []
    grouping = read_grouping(annotations, errors)
    options = read_options(annotations, namespace=namespace)
    read = _READERS[kind](spec, annotations, grouping, errors)
    progress = None
    if kind is OwnerKind.JOB:
        status = obj(body.get("status"))
        read = _job_remaining(read, status, spec)
        progress = _job_progress(status, spec)
    return Owner(
        key=key,
        uid=text(meta.get("uid")),
        options=options,
        grouping=grouping,
        priority_class=labels.get(names.OWNER_PRIORITY_CLASS)
        or annotations.get(names.OWNER_PRIORITY_CLASS, ""),
        errors=(*options.errors, *errors),
        progress=progress,
        **read,
    )


def _job(
    spec: Mapping[str, Any], _: Mapping[str, str], grouping: Grouping | None, errors: list[str]
) -> dict[str, Any]:
    """An Indexed Job: its parallelism pods (at most its completions). A NonIndexed Job's pods
    are alone unless they ask for it whole (the pods decide: they say which gang they are
    in); then the same count."""
    pods = _job_pods(spec, "spec", errors)
    indexed = text(spec.get("completionMode")) == "Indexed"
    if grouping is Grouping.NONE:
        shape = "Indexed Job with gang-scheduler.io/owner-gang: none: each pod as it comes"
        return {"parts": {"": 1}, "whole_size": pods, "shape": shape}
    shape = f"{'Indexed' if indexed else 'NonIndexed'} Job of {_plural(pods, 'pod')}"
    return {"parts": {"": pods}, "whole_size": pods, "shape": shape}


def _index_count(indexes: str) -> int:
    """How many indexes a Job's status names ("1,3-5": 4); 0 for what does not read."""
    count = 0
    for piece in indexes.split(","):
        low, _, high = piece.strip().partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            count += (int(high) - int(low) + 1) if high and int(high) >= int(low) else 1
    return count


def _job_progress(status: Mapping[str, Any], spec: Mapping[str, Any]) -> JobProgress | None:
    """A Job's progress by its status; None without completions (a work queue's pods end
    when one succeeds: no round comes after)."""
    completions = whole(spec.get("completions"))
    if completions is None:
        return None
    # A status beyond the spec (written by hand, say) counts no more than the completions.
    succeeded = min(max(whole(status.get("succeeded")) or 0, 0), max(completions, 0))
    failed = _index_count(text(status.get("failedIndexes")))
    return JobProgress(succeeded=succeeded, left=max(completions - succeeded - failed, 0))


def _job_remaining(
    read: dict[str, Any], status: Mapping[str, Any], spec: Mapping[str, Any]
) -> dict[str, Any]:
    """A Job near its end runs fewer pods than its parallelism: completions not yet
    succeeded. Its last round is a gang of those, not one that waits for pods the Job will
    never make (10 completions 4 at a time: a last round of 2)."""
    completions = whole(spec.get("completions"))
    succeeded = whole(status.get("succeeded")) or 0
    # Indexes failed for good (backoffLimitPerIndex) are not made again either.
    failed = _index_count(text(status.get("failedIndexes")))
    if completions is None or not 0 < succeeded + failed < completions:
        return read
    left = completions - succeeded - failed
    size = read["parts"][""]
    if size <= left:
        return read
    return {
        **read,
        "parts": {"": left},
        "whole_size": min(read["whole_size"], left),
        "shape": f"{read['shape']}, {left} of {completions} completions left",
    }


def _jobset(
    spec: Mapping[str, Any],
    annotations: Mapping[str, str],
    grouping: Grouping | None,
    errors: list[str],
) -> dict[str, Any]:
    """Every replica of every replicated Job a gang of its Job's pods, the replicas bound as
    one GangGroup, except: replicated Jobs started one after the other (InOrder, dependsOn)
    are a GangGroup each; a gang per replica when asked (ours: replica); with JobSet's
    exclusive placement a replica is its leader alone, since JobSet's pod webhook refuses
    the followers until the leader is placed (and then pins them to its domain); parts whose
    pods say owner-gang none are left out, and so are those another scheduler places."""
    parts: dict[str, int] = {}
    by_job: dict[str, list[str]] = {}
    alone: set[str] = set()
    left_out: set[str] = set()
    schedulers: dict[str, str] = {}
    described: list[str] = []
    staged = text(obj(spec.get("startupPolicy")).get("startupPolicyOrder")) == "InOrder"
    per_replica = grouping is Grouping.REPLICA
    rjobs = objs(spec.get("replicatedJobs"))
    replicas_in_all = sum(_count(r.get("replicas"), 1, "", []) for r in rjobs)  # errors said below
    if replicas_in_all > MAX_REPLICAS:
        errors.append(
            f"spec.replicatedJobs have {replicas_in_all} replicas in all; a JobSet makes gangs "
            f"of at most {MAX_REPLICAS} (give its pods {names.OWNER_GANG}: none, or a PodGroup)"
        )
        return {"shape": f"{replicas_in_all} replicas: too many to group"}
    for i, rjob in enumerate(rjobs):
        name = text(rjob.get("name"))
        field = f"spec.replicatedJobs[{i}]"
        replicas = _count(rjob.get("replicas"), 1, f"{field}.replicas", errors)
        template = obj(rjob.get("template"))
        job_spec = obj(template.get("spec"))
        pods = _job_pods(job_spec, f"{field}.template.spec", errors)
        pod_template = obj(job_spec.get("template"))
        pod_notes = texts(obj(pod_template.get("metadata")).get("annotations"))
        pod_grouping = read_grouping(pod_notes, [])  # a bad value: the pods' own error
        # Unset: its pods may still be ours (a platform's webhook may set it).
        scheduler = text(obj(pod_template.get("spec")).get("schedulerName"))
        exclusive = names.JOBSET_EXCLUSIVE in annotations or names.JOBSET_EXCLUSIVE in texts(
            obj(template.get("metadata")).get("annotations")
        )
        if grouping is Grouping.NONE or exclusive:
            pods = 1
        staged = staged or bool(objs(rjob.get("dependsOn")))
        for index in range(replicas):
            part = f"{name}-{index}"
            parts[part] = pods
            schedulers[part] = scheduler
            by_job.setdefault(name, []).append(part)
            if pod_grouping is Grouping.NONE:
                left_out.add(part)
            elif (
                per_replica
                or exclusive
                or pod_grouping is Grouping.REPLICA
                or grouping is Grouping.NONE
            ):
                alone.add(part)
        how = " (its leader first: exclusive placement)" if exclusive else ""
        described.append(f"{name} {replicas} x {_plural(pods, 'pod')}{how}")
    grouped = sorted(p for p in parts if p not in alone and p not in left_out)
    everything = tuple(grouped)
    together: dict[str, tuple[str, ...]] = {}
    for job_parts in by_job.values():
        in_order = tuple(sorted(p for p in job_parts if p not in alone and p not in left_out))
        for part in job_parts:
            if part in alone or part in left_out:
                together[part] = (part,)
            else:  # started one replicated Job after the other: a GangGroup each
                together[part] = in_order if staged else everything
    how = (
        "a gang per replica"
        if per_replica or grouping is Grouping.NONE
        else "a gang per replicated job (started in order)"
        if staged
        else "one gang"
    )
    shape = f"{_plural(len(by_job), 'replicated job')} ({', '.join(described)}), {how}"
    return {"parts": parts, "together": together, "schedulers": schedulers, "shape": shape}


def _leader_worker_set(
    spec: Mapping[str, Any],
    annotations: Mapping[str, str],
    grouping: Grouping | None,
    errors: list[str],
) -> dict[str, Any]:
    template = obj(spec.get("leaderWorkerTemplate"))
    size = _count(template.get("size"), 1, "spec.leaderWorkerTemplate.size", errors, low=1)
    replicas = _count(spec.get("replicas"), 1, "spec.replicas", errors)
    if grouping is Grouping.NONE:
        return {"part_size": 1, "shape": "each pod alone (gang-scheduler.io/owner-gang: none)"}
    # LeaderWorkerSet creates a group's workers only once its leader is Ready (LeaderReady)
    # or placed (exclusive placement): then the group's gang is its leader, the workers follow.
    later = text(spec.get("startupPolicy")) == "LeaderReady" or (names.LWS_EXCLUSIVE in annotations)
    if later:
        return {
            "part_size": 1,
            "shape": f"{_plural(replicas, 'group')} of {size}: the leader first, its workers "
            "once it is ready or placed (startupPolicy LeaderReady, or exclusive placement)",
        }
    return {
        "part_size": size,
        "shape": f"{_plural(replicas, 'group')} of {size} (a leader and "
        f"{_plural(size - 1, 'worker')}), a gang per group",
    }


def _ray_cluster(
    spec: Mapping[str, Any], _: Mapping[str, str], grouping: Grouping | None, errors: list[str]
) -> dict[str, Any]:
    """KubeRay's own PodGroup: the head plus each worker group's desired replicas (replicas
    held between minReplicas and maxReplicas) times its numOfHosts; suspended groups none."""
    workers = 0
    groups: list[str] = []
    for i, group in enumerate(objs(spec.get("workerGroupSpecs"))):
        field = f"spec.workerGroupSpecs[{i}]"
        if group.get("suspend") is True:
            continue
        low = _count(group.get("minReplicas"), 0, f"{field}.minReplicas", errors)
        high = _count(group.get("maxReplicas"), INT32_MAX, f"{field}.maxReplicas", errors)
        wanted = _count(group.get("replicas"), low, f"{field}.replicas", errors)
        hosts = _count(group.get("numOfHosts"), 1, f"{field}.numOfHosts", errors, low=1)
        replicas = high if low > high else min(max(wanted, low), high)
        workers += replicas * hosts
        groups.append(f"{text(group.get('groupName')) or i}: {replicas * hosts}")
    size = 1 if grouping is Grouping.NONE else 1 + workers
    size = _at_most_int32(size, "spec.workerGroupSpecs with the head", errors)
    shape = f"head and {_plural(workers, 'worker')} ({', '.join(groups) or 'no worker group'})"
    return {"parts": {"": size}, "shape": shape}


def _replica_specs(
    specs: Mapping[str, Any],
    field: str,
    errors: list[str],
    defaults: Mapping[str, int] = MappingProxyType({}),
) -> tuple[dict[str, int], list[str]]:
    counts: dict[str, int] = {}
    for role, replica in sorted(specs.items()):
        default = defaults.get(role, 1)
        counts[role] = _count(
            obj(replica).get("replicas"), default, f"{field}.{role}.replicas", errors
        )
    return counts, [f"{role} {n}" for role, n in counts.items()]


def _at_most_int32(size: int, field: str, errors: list[str]) -> int:
    """A gang's size summed over replica specs, each an int32, may pass one: said, and
    capped (fuzzing found an MPIJob of 1 launcher and 2**31-1 workers)."""
    if size <= MAX_COUNT:
        return size
    errors.append(f"{field} add up to {size} pods, more than a gang can have ({MAX_COUNT})")
    return MAX_COUNT


def _min_available(spec: Mapping[str, Any], errors: list[str]) -> int | None:
    policy = obj(obj(spec.get("runPolicy")).get("schedulingPolicy"))
    if policy.get("minAvailable") is None:
        return None
    return _count(
        policy.get("minAvailable"), 1, "spec.runPolicy.schedulingPolicy.minAvailable", errors, low=1
    )


def _mpi_job(
    spec: Mapping[str, Any], _: Mapping[str, str], grouping: Grouping | None, errors: list[str]
) -> dict[str, Any]:
    """The MPI Operator's own PodGroup: the workers and the launcher, or minAvailable. A
    launcher created only once the workers run (WaitForWorkersReady) is not waited for."""
    counts, described = _replica_specs(
        obj(spec.get("mpiReplicaSpecs")), "spec.mpiReplicaSpecs", errors, {"Worker": 0}
    )
    workers = counts.get("Worker", 0)
    later = text(spec.get("launcherCreationPolicy")) == "WaitForWorkersReady"
    size = _min_available(spec, errors) or _at_most_int32(
        workers + (0 if later else counts.get("Launcher", 1)), "spec.mpiReplicaSpecs", errors
    )
    if grouping is Grouping.NONE:
        size = 1
    shape = f"{', '.join(described)}" + (" (the launcher once the workers run)" if later else "")
    return {"parts": {"": max(size, 1)}, "shape": shape}


def _pytorch_job(
    spec: Mapping[str, Any], _: Mapping[str, str], grouping: Grouping | None, errors: list[str]
) -> dict[str, Any]:
    """The training operator's PodGroup: every replica, or minAvailable."""
    counts, described = _replica_specs(
        obj(spec.get("pytorchReplicaSpecs")), "spec.pytorchReplicaSpecs", errors
    )
    size = _min_available(spec, errors) or _at_most_int32(
        sum(counts.values()), "spec.pytorchReplicaSpecs", errors
    )
    if grouping is Grouping.NONE:
        size = 1
    return {"parts": {"": max(size, 1)}, "shape": ", ".join(described) or "no replicas"}


# Spark's memory settings are JVM sizes: a number of MiB, or with k, m, g, t or p (binary).
_JVM_SIZE = re.compile(r"^\s*(\d{1,15})\s*([kmgtp]?)b?\s*$", re.IGNORECASE)
_JVM_UNITS = {"": 2**20, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}
# Spark's default memory overhead of a pod: a tenth of its memory, at least 384 MiB.
_OVERHEAD_FACTOR, _OVERHEAD_MIN = 0.1, 384 * 2**20


def _jvm_bytes(raw: object, field: str, errors: list[str]) -> int | None:
    if raw is None:
        return None
    found = _JVM_SIZE.match(raw) if isinstance(raw, str) else None
    if found is None:
        errors.append(f"{field} must be a JVM memory size such as 512m or 4g, got {raw!r}")
        return None
    return int(found[1]) * _JVM_UNITS[found[2].lower()]


def _spark_pod(role: Mapping[str, Any], field: str, errors: list[str]) -> dict[str, int]:
    """What a Spark driver or executor pod requests, as Spark makes it: cpu from
    coreRequest, else cores (1 by default); memory (1g by default) plus its overhead."""
    cpu = 1000
    if role.get("coreRequest") is not None:
        try:
            cpu = quantity(CPU, role.get("coreRequest"))
        except ValueError:
            raw = role.get("coreRequest")
            errors.append(f"{field}.coreRequest must be {QUANTITY_RULE}, got {raw!r}")
    elif role.get("cores") is not None:
        cpu = _count(role.get("cores"), 1, f"{field}.cores", errors, low=1) * 1000
    memory = _jvm_bytes(role.get("memory"), f"{field}.memory", errors) or 2**30
    overhead = _jvm_bytes(role.get("memoryOverhead"), f"{field}.memoryOverhead", errors)
    if overhead is None:
        overhead = max(int(memory * _OVERHEAD_FACTOR), _OVERHEAD_MIN)
    return {CPU: cpu, MEMORY: memory + overhead, PODS: 1}


def _spark_application(
    spec: Mapping[str, Any], _: Mapping[str, str], grouping: Grouping | None, errors: list[str]
) -> dict[str, Any]:
    """The Spark Operator's own PodGroup: the driver alone (minMember 1: the executors exist
    only once it runs), with room for it and its executors as minResources. Its executors:
    the minimum of dynamic allocation, else the instances asked for (2 when unsaid, as
    Spark starts)."""
    if grouping is Grouping.NONE:
        return {"parts": {"": 1}, "shape": "each pod alone (gang-scheduler.io/owner-gang: none)"}
    dynamic = obj(spec.get("dynamicAllocation"))
    executor = obj(spec.get("executor"))
    if dynamic.get("enabled") is True:
        field = "spec.dynamicAllocation.minExecutors"
        executors = _count(dynamic.get("minExecutors"), 0, field, errors)
    else:
        executors = _count(executor.get("instances"), 2, "spec.executor.instances", errors)
    driver = _spark_pod(obj(spec.get("driver")), "spec.driver", errors)
    each = _spark_pod(executor, "spec.executor", errors)
    total = {r: driver[r] + executors * each[r] for r in driver}
    if any(v > MAX_AMOUNT for v in total.values()):
        errors.append(f"{executors} executors ask for more than a cluster can have")
        total = driver
    shape = (
        f"the driver and {_plural(executors, 'executor')}: the driver binds once the "
        f"cluster has {total[CPU] / 1000:g} cpu and {total[MEMORY] / 2**20:.0f}Mi free in all "
        "for them (the Spark Operator's own PodGroup: minMember 1 and minResources); the "
        "executors follow"
    )
    return {"parts": {"": 1}, "min_resources": Resources(total), "shape": shape}


_READERS = {
    OwnerKind.JOB: _job,
    OwnerKind.JOBSET: _jobset,
    OwnerKind.LEADER_WORKER_SET: _leader_worker_set,
    OwnerKind.RAY_CLUSTER: _ray_cluster,
    OwnerKind.MPI_JOB: _mpi_job,
    OwnerKind.PYTORCH_JOB: _pytorch_job,
    OwnerKind.SPARK_APPLICATION: _spark_application,
}
