"""Gangs from owners: the job frameworks' objects (Jobs, JobSets, LeaderWorkerSets,
RayClusters, MPIJobs, PyTorchJobs) as the gangs their operators mean.

Nobody writes gang pods by hand; operators create them, and most of them ask for no gang
(JobSet, LeaderWorkerSet) or for one only in a mode that must be switched on. A pod of ours
that declares no gang is grouped by its owner (KAI's podgrouper does the same): the pod says
*which* gang it is in (its controller and the labels its operator writes), the owner object
says *how many* members that gang needs. So a pod's gang key never depends on another
object, and a JobSet's or RayCluster's size is read from the object that declares it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class OwnerKind(Enum):
    """The owner kinds that make gangs, by their Kubernetes kind."""

    JOB = "Job"
    JOBSET = "JobSet"
    LEADER_WORKER_SET = "LeaderWorkerSet"
    RAY_CLUSTER = "RayCluster"
    MPI_JOB = "MPIJob"
    PYTORCH_JOB = "PyTorchJob"
    SPARK_APPLICATION = "SparkApplication"

    @property
    def kind(self) -> str:
        """The name the cache and the watches know this kind by (a LIST's key)."""
        return self.value.lower() + "s"


class Grouping(Enum):
    """``gang-scheduler.io/owner-gang``, on a pod (its template) or on its owner."""

    NONE = "none"  # no gang from the owner: each pod alone
    WHOLE = "whole"  # the owner whole (a NonIndexed Job: its parallelism pods)
    REPLICA = "replica"  # a JobSet: one gang per replica of a replicated Job


@dataclass(frozen=True, slots=True)
class OwnerKey:
    namespace: str
    kind: OwnerKind
    name: str

    def __str__(self) -> str:
        return f"{self.kind.value} {self.namespace}/{self.name}"


def gang_name(kind: OwnerKind, name: str, part: str = "") -> str:
    """The gang's name for part ``part`` of owner ``kind``/``name``: "JobSet/llama/workers-0".
    A "/" never occurs in a gang a user names, so these never clash with one."""
    return f"{kind.value}/{name}/{part}" if part else f"{kind.value}/{name}"


def child_job(ref: OwnerKey, part: str) -> OwnerKey | None:
    """The Job that part ``part`` of a JobSet is (JobSet names its Jobs
    <jobset>-<replicatedJob>-<index>, the part's name): its status says how many of the
    part's pods are still to come. None for other owners."""
    if ref.kind is not OwnerKind.JOBSET or not part:
        return None
    return OwnerKey(ref.namespace, OwnerKind.JOB, f"{ref.name}-{part}")


def owners_of(claim_owner: OwnerKey | None, part: str) -> tuple[OwnerKey, ...]:
    """Every owner object a gang from ``claim_owner`` reads: the owner, and a JobSet part's
    Job."""
    if claim_owner is None:
        return ()
    job = child_job(claim_owner, part)
    return (claim_owner, job) if job is not None else (claim_owner,)
