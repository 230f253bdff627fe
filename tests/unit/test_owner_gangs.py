"""Gangs from owners: pods that declare no gang are grouped as their operator means them.

The owner objects are the operators' own examples (tests/unit/owners/, copied from the
KubeRay, MPI Operator, training-operator, LeaderWorkerSet and JobSet modules the e2e tests
build); the pods carry what each operator writes on the pods it creates (the source lines
are named beside each builder)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from scheduler.codecs.objects import pod_from_dict
from scheduler.codecs.owners import controlling_job, owner_from_dict
from scheduler.core.explaining import explain
from scheduler.core.gangs import resolve
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.gangs import JobProgress, Owner
from scheduler.model.owners import OwnerKind
from scheduler.model.pods import GangKey, GangSource, Pod
from scheduler.model.snapshot import PriorityClass, Snapshot
from scheduler.model.times import format_time
from tests.unit.builders import SCHEDULER, T0, node

EXAMPLES = Path(__file__).parent / "owners"
CONFIG = Config()


def example(name: str, *, namespace: str = "ml", **meta: Any) -> dict[str, Any]:
    body = yaml.safe_load((EXAMPLES / name).read_text())
    body["metadata"].update(namespace=namespace, uid=f"uid-{body['metadata']['name']}", **meta)
    return body


def owner(kind: OwnerKind, body: dict[str, Any]) -> Owner:
    return owner_from_dict(kind, body)


def operator_pod(
    name: str,
    *,
    controller: tuple[str, str, str],
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    cpu: str = "1",
    namespace: str = "ml",
    node_name: str = "",
) -> Pod:
    api_version, kind, owner_name = controller
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER,
        "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu}}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    return pod_from_dict(
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{name}",
                "labels": labels or {},
                "annotations": annotations or {},
                "creationTimestamp": format_time(T0 - 60),
                "ownerReferences": [
                    {
                        "apiVersion": api_version,
                        "kind": kind,
                        "name": owner_name,
                        "uid": f"uid-{owner_name}",
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": spec,
            "status": {"phase": "Running" if node_name else "Pending"},
        }
    )


def job_pods(job: str, count: int, *, indexed: bool = True, **kw: Any) -> list[Pod]:
    """A Job's pods, as the Job controller labels them (batch.kubernetes.io/job-name, and
    the completion index of an Indexed Job)."""
    pods = []
    for i in range(count):
        labels = {"batch.kubernetes.io/job-name": job, **kw.pop("labels", {})}
        if indexed:
            labels[names.JOB_COMPLETION_INDEX] = str(i)
        pods.append(
            operator_pod(f"{job}-{i}", controller=("batch/v1", "Job", job), labels=labels, **kw)
        )
    return pods


def jobset_pods(jobset: str, replicated_job: str, replicas: int, pods: int, **kw: Any) -> list:
    """The pods of a JobSet's Jobs, labelled as JobSet v0.10.1's labelAndAnnotateObject
    does (pkg/controllers/jobset_controller.go)."""
    made = []
    for index in range(replicas):
        job = f"{jobset}-{replicated_job}-{index}"
        for i in range(pods):
            labels = {
                names.JOBSET_NAME: jobset,
                names.JOBSET_REPLICATED_JOB: replicated_job,
                names.JOBSET_JOB_INDEX: str(index),
                "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicas),
                names.JOB_COMPLETION_INDEX: str(i),
            }
            made.append(
                operator_pod(f"{job}-{i}", controller=("batch/v1", "Job", job), labels=labels, **kw)
            )
    return made


def lws_pods(lws: str, *, group: int, size: int, **kw: Any) -> list[Pod]:
    """One group of a LeaderWorkerSet: the leader (of the leader StatefulSet) and its workers
    (of the group's worker StatefulSet), labelled by LWS v0.7.0's pod webhook."""
    labels = {names.LWS_NAME: lws, names.LWS_GROUP_INDEX: str(group)}
    notes = {"leaderworkerset.sigs.k8s.io/size": str(size)}
    leader = operator_pod(
        f"{lws}-{group}",
        controller=("apps/v1", "StatefulSet", lws),
        labels={**labels, "leaderworkerset.sigs.k8s.io/worker-index": "0"},
        annotations=notes,
        **kw,
    )
    workers = [
        operator_pod(
            f"{lws}-{group}-{i}",
            controller=("apps/v1", "StatefulSet", f"{lws}-{group}"),
            labels={**labels, "leaderworkerset.sigs.k8s.io/worker-index": str(i)},
            annotations=notes,
            **kw,
        )
        for i in range(1, size)
    ]
    return [leader, *workers]


def cluster(
    pods: list[Pod],
    owners: list[Owner],
    *,
    nodes: int = 4,
    cpu: str = "8",
    owner_kinds: frozenset[OwnerKind] = frozenset(OwnerKind),
    classes: tuple[PriorityClass, ...] = (),
) -> Snapshot:
    return Snapshot(
        nodes={n.name: n for n in (node(f"n{i}", cpu=cpu) for i in range(nodes))},
        pods=tuple(pods),
        owners={o.key: o for o in owners},
        owner_kinds=owner_kinds,
        priority_classes={c.name: c for c in classes},
    )


def bound(snapshot: Snapshot, *, now: float = T0) -> set[str]:
    result = schedule(snapshot, now=now)
    return {b.pod.name for g in result.bindings for b in g.bindings}


def events(snapshot: Snapshot, reason: str) -> list[str]:
    return [e.message for e in schedule(snapshot, now=T0).events if e.reason == reason]


# -- Jobs ------------------------------------------------------------------------------------


def indexed_job(name: str, parallelism: int, **spec: Any) -> Owner:
    return owner(
        OwnerKind.JOB,
        {
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
            "spec": {
                "parallelism": parallelism,
                "completions": parallelism,
                "completionMode": "Indexed",
                **spec,
            },
        },
    )


def test_an_indexed_job_is_a_gang_of_its_parallelism() -> None:
    pods = job_pods("train", 4, cpu="4")
    gang = resolve(cluster(pods, [indexed_job("train", 4)]), CONFIG).gangs[
        GangKey("ml", "Job/train")
    ]
    assert (gang.min_member, gang.total) == (4, 4)
    assert gang.origin == "gang from Job ml/train: Indexed Job of 4 pods"
    assert pods[0].gang is not None
    assert pods[0].gang.source is GangSource.OWNER


def test_an_indexed_job_that_does_not_fit_whole_binds_nothing() -> None:
    pods = job_pods("train", 4, cpu="6")
    assert bound(cluster(pods, [indexed_job("train", 4)], nodes=3)) == set()


def test_the_second_of_two_indexed_jobs_binds_nothing_when_only_one_fits() -> None:
    first = job_pods("a", 4, cpu="8")
    second = job_pods("b", 4, cpu="8")
    owners = [indexed_job("a", 4), indexed_job("b", 4)]
    got = bound(cluster([*first, *second], owners, nodes=6))
    assert got == {f"a-{i}" for i in range(4)}


def test_a_gang_waits_until_all_of_its_indexed_job_pods_exist() -> None:
    pods = job_pods("train", 3)
    messages = events(cluster(pods, [indexed_job("train", 4)]), "GangWaiting")
    assert bound(cluster(pods, [indexed_job("train", 4)])) == set()
    assert messages
    assert "waits until all 4 members exist" in messages[0]


def test_the_last_round_of_an_indexed_job_is_a_gang_of_the_completions_left() -> None:
    """10 completions 4 at a time, 8 succeeded: the Job makes 2 more pods, not 4."""
    job = owner(
        OwnerKind.JOB,
        {
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {"parallelism": 4, "completions": 10, "completionMode": "Indexed"},
            "status": {"succeeded": 8},
        },
    )
    pods = job_pods("train", 2)
    gang = resolve(cluster(pods, [job]), CONFIG).gangs[GangKey("ml", "Job/train")]
    assert gang.min_member == 2
    assert gang.origin.endswith("Indexed Job of 4 pods, 2 of 10 completions left")
    assert len(bound(cluster(pods, [job]))) == 2


def test_a_jobs_pods_that_succeeded_are_not_counted_twice_toward_its_last_round() -> None:
    """7 completions at once, 4 succeeded: the Job's status already shrinks the gang to the
    3 left, so the 4 pods that Succeeded do not also count toward those 3 (review of seed
    5035's mend): room for 2 of them binds nothing."""
    job = owner(
        OwnerKind.JOB,
        {
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {"parallelism": 7, "completions": 7, "completionMode": "Indexed"},
            "status": {"succeeded": 4},
        },
    )
    done = [replace(p, phase="Succeeded") for p in job_pods("train", 4, node_name="n0")]
    rest = job_pods("train", 7)[4:]
    gang = resolve(cluster([*done, *rest], [job]), CONFIG).gangs[GangKey("ml", "Job/train")]
    assert (gang.min_member, gang.completed, gang.need) == (3, 0, 3)
    assert bound(cluster([*done, *rest], [job], nodes=1, cpu="2")) == set()
    assert len(bound(cluster([*done, *rest], [job], nodes=1, cpu="3"))) == 3


def job_with(
    name: str, *, parallelism: int, completions: int, succeeded: int, uid: str = ""
) -> Owner:
    return owner(
        OwnerKind.JOB,
        {
            "metadata": {"name": name, "namespace": "ml", "uid": uid or f"uid-{name}"},
            "spec": {"parallelism": parallelism, "completions": completions},
            "status": {"succeeded": succeeded},
        },
    )


def declared_job_pods(job: str, names_: list[str], *, min_available: int, **kw: Any) -> list:
    """A NonIndexed Job's pods that declare a Koordinator gang of their own."""
    notes = {names.KOORD_NAME: job, names.KOORD_MIN_AVAILABLE: str(min_available)}
    labels = {"batch.kubernetes.io/job-name": job}
    return [
        operator_pod(n, controller=("batch/v1", "Job", job), labels=labels, annotations=notes, **kw)
        for n in names_
    ]


def succeeded(pods: list[Pod]) -> list[Pod]:
    return [replace(p, node_name="n0", phase="Succeeded") for p in pods]


def test_a_declared_gangs_member_that_succeeded_and_went_with_its_node_still_counts() -> None:
    """Chaos seed 6067: a Job's gang of 2 (its pods' annotations); one pod Succeeded and
    was deleted with its node; the Job counts it in status.succeeded and makes one pod for
    the completion left. That pod completes the gang alone; without the Job's count it
    would wait forever for a second member no controller will make."""
    job = job_with("train", parallelism=2, completions=2, succeeded=1)
    last = declared_job_pods("train", ["train-b"], min_available=2)
    assert (last[0].job, last[0].job_uid) == ("train", "uid-train")
    gang = resolve(cluster(last, [job]), CONFIG).gangs[GangKey("ml", "train")]
    assert (gang.job_progress, gang.completed, gang.need) == (JobProgress(1, 1), 1, 1)
    assert bound(cluster(last, [job])) == {"train-b"}
    assert bound(cluster(last, [])) == set()  # the Job not seen (yet): nothing to count
    assert explain(cluster(last, [job]), GangKey("ml", "train"), now=T0, config=CONFIG)[0] == (
        "gang ml/train: min 2 of 2, Strict, timeout 600s; 1 members, 0 bound, 1 pending; "
        "1 Succeeded count toward the minimum (as its Job's status counts them)"
    )


def test_a_declared_jobs_succeeded_pods_still_there_count_once() -> None:
    job = job_with("train", parallelism=3, completions=3, succeeded=1)
    done = succeeded(declared_job_pods("train", ["train-a"], min_available=3))
    rest = declared_job_pods("train", ["train-b", "train-c"], min_available=3)
    gang = resolve(cluster([*done, *rest], [job]), CONFIG).gangs[GangKey("ml", "train")]
    assert (gang.completed, gang.need) == (1, 2)


def test_a_jobs_next_round_after_its_succeeded_pods_went_is_all_or_nothing() -> None:
    """8 completions 4 at a time: the first round's 4 Succeeded and were deleted, the Job
    made 4 new pods. The Job's count fills only the places beyond the completions it has
    left, so the new round is a whole gang of 4 again: room for 3 binds nothing."""
    job = job_with("train", parallelism=4, completions=8, succeeded=4)
    pods = declared_job_pods("train", [f"train-{i}" for i in range(4, 8)], min_available=4)
    gang = resolve(cluster(pods, [job]), CONFIG).gangs[GangKey("ml", "train")]
    assert (gang.completed, gang.need) == (0, 4)
    assert bound(cluster(pods, [job], nodes=1, cpu="3")) == set()
    assert len(bound(cluster(pods, [job], nodes=1, cpu="4"))) == 4


def test_the_first_pod_of_a_jobs_next_round_does_not_bind_alone_beside_the_last_rounds() -> None:
    """Review of the Succeeded rule: 4 completions 2 at a time, a gang of 2; the first round's
    2 Succeeded and are still there. The Job controller makes the next round's pods one
    after the other (its slow start): a pass that sees the first alone, counting the pods,
    took the 2 Succeeded for the places the missing pod would take and bound it alone. The
    Job's count says 2 completions are left: the round is a whole gang of 2."""
    job = job_with("train", parallelism=2, completions=4, succeeded=2)
    done = succeeded(declared_job_pods("train", ["train-0", "train-1"], min_available=2))
    first, second = declared_job_pods("train", ["train-2", "train-3"], min_available=2)
    assert bound(cluster([*done, first], [job])) == set()
    snap = cluster([*done, first, second], [job])
    assert bound(snap) == {"train-2", "train-3"}
    assert [g.all_or_nothing for g in schedule(snap, now=T0).bindings] == [True]
    # A gang the Job makes itself (Indexed, no gang declared) likewise.
    indexed = owner(
        OwnerKind.JOB,
        {
            "metadata": {"name": "train", "namespace": "ml", "uid": "uid-train"},
            "spec": {"parallelism": 2, "completions": 4, "completionMode": "Indexed"},
            "status": {"succeeded": 2},
        },
    )
    done = succeeded(job_pods("train", 2))
    first = job_pods("train", 4)[2]
    assert bound(cluster([*done, first], [indexed])) == set()


def test_a_jobs_count_is_not_taken_from_an_older_job_of_the_same_name() -> None:
    """A JobSet restart makes its Jobs anew under the same names, and the pods' watch may
    run ahead of the Jobs': the old Job's count (2 succeeded) is not the new one's."""
    old = job_with("train", parallelism=2, completions=2, succeeded=1, uid="uid-old")
    last = declared_job_pods("train", ["train-b"], min_available=2)
    gang = resolve(cluster(last, [old]), CONFIG).gangs[GangKey("ml", "train")]
    assert (gang.job_progress, gang.need) == (None, 2)
    assert bound(cluster(last, [old])) == set()


def test_a_jobs_hostile_status_reads_as_progress_within_its_completions() -> None:
    """A status written by hand (or garbled) never counts more than the Job's completions,
    nor a negative left; what does not read counts nothing."""

    def progress(status: dict) -> JobProgress | None:
        body = {"metadata": {"name": "train", "namespace": "ml"}, "spec": {"completions": 4}}
        return owner(OwnerKind.JOB, {**body, "status": status}).progress

    assert progress({"succeeded": 10**12}) == JobProgress(succeeded=4, left=0)
    assert progress({"succeeded": -3}) == JobProgress(succeeded=0, left=4)
    assert progress({"succeeded": "lots", "failedIndexes": "x-9,3-1"}) == JobProgress(0, 3)
    assert progress({"succeeded": 1, "failedIndexes": "0-99999999999"}) == JobProgress(1, 0)
    no_completions = {"metadata": {"name": "q", "namespace": "ml"}, "spec": {"parallelism": 3}}
    assert owner(OwnerKind.JOB, no_completions).progress is None


def test_a_pod_whose_controller_is_not_a_batch_job_names_no_job() -> None:
    other = operator_pod("w-0", controller=("example.com/v1", "Job", "train"), labels={})
    assert (other.job, other.job_uid) == ("", "")
    # Hostile references read as none, never raise.
    for refs in ("nope", [None, 7], [{"controller": True, "kind": "Job", "apiVersion": 5}]):
        assert controlling_job(refs) == ("", "")
    garbled = [{"controller": True, "kind": "Job", "apiVersion": "batch/v1", "name": ["x"]}]
    assert controlling_job(garbled) == ("", "")


def test_a_nonindexed_job_places_each_pod_alone_unless_its_pods_ask_for_a_gang() -> None:
    pods = job_pods("queue", 3, indexed=False, cpu="8")
    assert all(p.gang is None for p in pods)  # a work queue's pods: alone, as before
    plain = owner(
        OwnerKind.JOB,
        {"metadata": {"name": "queue", "namespace": "ml"}, "spec": {"parallelism": 3}},
    )
    assert len(bound(cluster(pods, [plain], nodes=2))) == 2  # two fit: two bind


def test_a_pod_annotation_asks_a_nonindexed_job_for_its_whole_gang() -> None:
    pods = job_pods("queue", 3, indexed=False, cpu="8", annotations={names.OWNER_GANG: "whole"})
    plain = owner(
        OwnerKind.JOB,
        {"metadata": {"name": "queue", "namespace": "ml"}, "spec": {"parallelism": 3}},
    )
    assert bound(cluster(pods, [plain], nodes=2)) == set()


def test_owner_gang_none_on_the_pod_leaves_each_pod_alone() -> None:
    pods = job_pods("train", 4, cpu="8", annotations={names.OWNER_GANG: "none"})
    assert all(p.gang is None for p in pods)
    assert len(bound(cluster(pods, [indexed_job("train", 4)], nodes=2))) == 2


def test_owner_gang_none_on_the_owner_places_its_pods_as_they_come() -> None:
    pods = job_pods("train", 4, cpu="8")
    job = indexed_job("train", 4)
    off = owner(
        OwnerKind.JOB,
        {
            "metadata": {
                "name": "train",
                "namespace": "ml",
                "annotations": {names.OWNER_GANG: "none"},
            },
            "spec": {"parallelism": 4, "completions": 4, "completionMode": "Indexed"},
        },
    )
    assert bound(cluster(pods, [job], nodes=2)) == set()
    assert bound(cluster(pods, [off], nodes=2))  # the first alone, the rest after it


def test_a_misspelt_owner_gang_annotation_is_an_invalid_gang_spec_that_names_the_values() -> None:
    pods = job_pods("train", 2, annotations={names.OWNER_GANG: "wholle"})
    messages = events(cluster(pods, [indexed_job("train", 2)]), "InvalidGangSpec")
    assert messages
    assert (
        "annotation gang-scheduler.io/owner-gang must be one of none, whole, replica"
        in (messages[0])
    )
    assert "'wholle'" in messages[0]


def test_a_hostile_parallelism_is_an_error_that_names_the_field() -> None:
    bad = owner(
        OwnerKind.JOB,
        {"metadata": {"name": "x", "namespace": "ml"}, "spec": {"parallelism": "lots"}},
    )
    assert bad.errors == (
        "spec.parallelism must be a whole number from 0 to 2147483647, got 'lots'",
    )


def test_the_owners_annotations_set_the_gangs_timeout_and_priority() -> None:
    job = owner(
        OwnerKind.JOB,
        {
            "metadata": {
                "name": "train",
                "namespace": "ml",
                "labels": {"priorityClassName": "high"},
                "annotations": {names.KOORD_WAITING_TIME: "90s"},
            },
            "spec": {"parallelism": 2, "completionMode": "Indexed"},
        },
    )
    snapshot = cluster(job_pods("train", 2), [job], classes=(PriorityClass("high", 1000),))
    gang = resolve(snapshot, CONFIG).gangs[GangKey("ml", "Job/train")]
    assert (gang.timeout_seconds, gang.priority) == (90.0, 1000)


def test_a_pods_own_annotation_overrides_its_owners() -> None:
    job = owner(
        OwnerKind.JOB,
        {
            "metadata": {
                "name": "train",
                "namespace": "ml",
                "annotations": {names.KOORD_WAITING_TIME: "90s"},
            },
            "spec": {"parallelism": 2, "completionMode": "Indexed"},
        },
    )
    pods = job_pods("train", 2, annotations={names.KOORD_WAITING_TIME: "30s"})
    gang = resolve(cluster(pods, [job]), CONFIG).gangs[GangKey("ml", "Job/train")]
    assert gang.timeout_seconds == 30.0


def test_topology_constraints_on_the_pods_place_their_owner_gang_with_the_solver() -> None:
    constraints = '{"node": {"type": "spread"}}'
    pods = job_pods("train", 2, annotations={names.TOPOLOGY_CONSTRAINTS: constraints})
    gang = resolve(cluster(pods, [indexed_job("train", 2)]), CONFIG).gangs[
        GangKey("ml", "Job/train")
    ]
    assert gang.topology_placed
    assert len(bound(cluster(pods, [indexed_job("train", 2)]))) == 2


def test_pods_whose_owner_is_not_seen_yet_wait_with_an_event_that_names_it() -> None:
    pods = job_pods("train", 2)
    assert bound(cluster(pods, [])) == set()
    messages = events(cluster(pods, []), "OwnerNotFound")
    assert messages
    assert "Job ml/train, which is not in the cache" in messages[0]


def test_pods_whose_owner_kind_cannot_be_read_are_placed_as_they_come() -> None:
    pods = jobset_pods("llama", "workers", 1, 2, cpu="8")
    unreadable = frozenset(OwnerKind) - {OwnerKind.JOBSET}
    gang = resolve(cluster(pods, [], owner_kinds=unreadable), CONFIG).gangs[
        GangKey("ml", "JobSet/llama/workers-0")
    ]
    assert gang.min_member == 1
    assert "JobSets are not readable here" in gang.origin
    assert len(bound(cluster(pods, [], nodes=1, owner_kinds=unreadable))) == 1


# -- JobSet ----------------------------------------------------------------------------------


def jobset(name: str, *replicated: tuple[str, int, int], **meta: Any) -> Owner:
    return owner(
        OwnerKind.JOBSET,
        {
            "metadata": {"name": name, "namespace": "ml", **meta},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": rj,
                        "replicas": replicas,
                        "template": {"spec": {"parallelism": pods, "completions": pods}},
                    }
                    for rj, replicas, pods in replicated
                ]
            },
        },
    )


def test_a_jobset_binds_whole_every_replicated_job_together() -> None:
    llama = jobset("llama", ("workers", 4, 2), ("driver", 1, 1))
    pods = [*jobset_pods("llama", "workers", 4, 2), *jobset_pods("llama", "driver", 1, 1)]
    snapshot = cluster(pods, [llama], nodes=9, cpu="1")
    assert len(bound(snapshot)) == 9
    short = cluster(pods, [llama], nodes=8, cpu="1")
    assert bound(short) == set()  # one pod short: nothing of it
    gang = resolve(snapshot, CONFIG).gangs[GangKey("ml", "JobSet/llama/workers-0")]
    assert gang.min_member == 2
    assert len(gang.group) == 5
    assert gang.origin == (
        "gang from JobSet ml/llama: 2 replicated jobs (workers 4 x 2 pods, driver 1 x 1 pod), "
        "one gang"
    )


def test_with_exclusive_placement_a_jobset_replica_is_its_leader_first() -> None:
    """JobSet's pod webhook refuses a replica's followers until its leader is placed (and
    then pins them to its domain): a gang of the whole replica would wait for ever. So each
    replica's leader is placed alone, and its followers follow."""
    exclusive = {names.JOBSET_EXCLUSIVE: "topology.kubernetes.io/zone"}
    llama = jobset("llama", ("workers", 4, 2), annotations=exclusive)
    leaders = [  # only the leaders exist until they are placed
        p
        for p in jobset_pods("llama", "workers", 4, 2, annotations=exclusive)
        if p.labels[names.JOB_COMPLETION_INDEX] == "0"
    ]
    snapshot = cluster(leaders, [llama], nodes=2, cpu="2")
    assert len(bound(snapshot)) == 4
    gang = resolve(snapshot, CONFIG).gangs[GangKey("ml", "JobSet/llama/workers-0")]
    assert (gang.min_member, gang.group) == (1, (gang.key,))
    assert "its leader first: exclusive placement" in gang.origin


def test_a_replicated_job_another_scheduler_places_is_not_waited_for() -> None:
    llama = owner(
        OwnerKind.JOBSET,
        {
            "metadata": {"name": "llama", "namespace": "ml"},
            "spec": {
                "replicatedJobs": [
                    {"name": "workers", "replicas": 2, "template": {"spec": {
                        "parallelism": 2, "template": {"spec": {"schedulerName": SCHEDULER}}}}},
                    {"name": "monitor", "replicas": 1, "template": {"spec": {
                        "parallelism": 1,
                        "template": {"spec": {"schedulerName": "default-scheduler"}}}}},
                    {"name": "sidecar", "replicas": 1, "template": {"spec": {
                        "parallelism": 1, "template": {
                            "metadata": {"annotations": {names.OWNER_GANG: "none"}}}}}},
                ]
            },
        },
    )  # fmt: skip
    pods = jobset_pods("llama", "workers", 2, 2)
    snapshot = cluster(pods, [llama], nodes=4, cpu="1")
    assert len(bound(snapshot)) == 4
    gang = resolve(snapshot, CONFIG).gangs[GangKey("ml", "JobSet/llama/workers-0")]
    assert gang.group == (
        GangKey("ml", "JobSet/llama/workers-0"),
        GangKey("ml", "JobSet/llama/workers-1"),
    )


def test_a_jobset_replica_near_its_end_is_a_gang_of_what_its_job_has_left() -> None:
    """One of a replica's two pods succeeded, the other failed and was made again: its Job
    says one completion is left, so the replica's gang is that one pod."""
    llama = jobset("llama", ("workers", 1, 2))
    child = owner(
        OwnerKind.JOB,
        {
            "metadata": {"name": "llama-workers-0", "namespace": "ml"},
            "spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed"},
            "status": {"succeeded": 1, "failed": 1},
        },
    )
    again = [p for p in jobset_pods("llama", "workers", 1, 2) if p.ref.name.endswith("-1")]
    snapshot = cluster(again, [llama, child])
    gang = resolve(snapshot, CONFIG).gangs[GangKey("ml", "JobSet/llama/workers-0")]
    assert gang.min_member == 1
    assert len(bound(snapshot)) == 1


def test_a_job_whose_indexes_failed_for_good_waits_only_for_the_rest() -> None:
    job = owner(
        OwnerKind.JOB,
        {
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {"parallelism": 4, "completions": 4, "completionMode": "Indexed",
                     "backoffLimitPerIndex": 0},
            "status": {"succeeded": 1, "failedIndexes": "0,2"},
        },
    )  # fmt: skip
    assert job.parts == {"": 1}


def test_our_annotation_on_the_jobset_asks_for_a_gang_per_replica() -> None:
    llama = jobset("llama", ("workers", 4, 2), annotations={names.OWNER_GANG: "replica"})
    pods = jobset_pods("llama", "workers", 4, 2)
    assert len(bound(cluster(pods, [llama], nodes=5, cpu="1"))) == 4


def test_a_jobset_started_in_order_is_a_gang_per_replicated_job() -> None:
    """StartupPolicy InOrder (JobSet's KEP 104 example): the workers are created only once
    the driver runs, so one gang of both would wait for ever."""
    body = example("jobset-in-order.yaml")
    js = owner(OwnerKind.JOBSET, body)
    driver = jobset_pods("driver-ready-worker-start", "driver", 1, 1)
    snapshot = cluster(driver, [js])
    assert bound(snapshot) == {"driver-ready-worker-start-driver-0-0"}
    gang = resolve(snapshot, CONFIG).gangs[
        GangKey("ml", "JobSet/driver-ready-worker-start/driver-0")
    ]
    assert gang.group == (gang.key,)
    assert "a gang per replicated job (started in order)" in gang.origin


# -- LeaderWorkerSet -------------------------------------------------------------------------


def test_a_leaderworkerset_that_makes_workers_once_the_leader_is_ready_gangs_the_leader() -> None:
    """startupPolicy LeaderReady (and exclusive placement): LeaderWorkerSet v0.7.0 creates a
    group's workers only once its leader is ready (or placed)."""
    body = example("leaderworkerset-sample.yaml")
    body["spec"]["startupPolicy"] = "LeaderReady"
    lws = owner(OwnerKind.LEADER_WORKER_SET, body)
    leader = lws_pods("leaderworkerset-sample", group=0, size=4)[:1]
    assert bound(cluster(leader, [lws])) == {"leaderworkerset-sample-0"}
    assert "the leader first" in lws.shape


def test_each_leaderworkerset_group_is_a_gang_of_its_own() -> None:
    lws = owner(OwnerKind.LEADER_WORKER_SET, example("leaderworkerset-sample.yaml"))
    pods = [
        p for g in range(3) for p in lws_pods("leaderworkerset-sample", group=g, size=4, cpu="2")
    ]
    got = bound(cluster(pods, [lws], nodes=2, cpu="9"))  # room for 8 pods: two groups
    assert len(got) == 8
    groups = {p.split("-")[2] for p in got}
    assert len(groups) == 2
    gang = resolve(cluster(pods, [lws]), CONFIG).gangs[
        GangKey("ml", "LeaderWorkerSet/leaderworkerset-sample/0")
    ]
    assert (gang.min_member, gang.group) == (4, (gang.key,))
    assert gang.origin.endswith("3 groups of 4 (a leader and 3 workers), a gang per group")


# -- RayCluster, MPIJob, PyTorchJob ------------------------------------------------------------


def test_a_raycluster_is_its_head_and_the_workers_kuberays_podgroup_counts() -> None:
    ray = owner(OwnerKind.RAY_CLUSTER, example("raycluster-scheduler-plugins.yaml"))
    name = "test-podgroup-0"
    head = operator_pod(
        f"{name}-head",
        controller=("ray.io/v1", "RayCluster", name),
        labels={"ray.io/cluster": name, "ray.io/node-type": "head"},
    )
    workers = [
        operator_pod(
            f"{name}-worker-{i}",
            controller=("ray.io/v1", "RayCluster", name),
            labels={"ray.io/cluster": name, "ray.io/node-type": "worker", "ray.io/group": "worker"},
        )
        for i in range(2)
    ]
    gang = resolve(cluster([head, *workers], [ray]), CONFIG).gangs[
        GangKey("ml", f"RayCluster/{name}")
    ]
    assert gang.min_member == 3  # KubeRay's own PodGroup: desired workers + 1
    assert gang.origin.endswith("head and 2 workers (worker: 2)")
    assert bound(cluster([head, *workers[:1]], [ray])) == set()
    assert len(bound(cluster([head, *workers], [ray]))) == 3


def test_an_mpijob_is_its_launcher_job_and_its_workers() -> None:
    mpi = owner(OwnerKind.MPI_JOB, example("mpijob-pi.yaml"))
    role = {names.KUBEFLOW_OPERATOR: "mpi-operator", names.KUBEFLOW_JOB_NAME: "pi"}
    launcher = operator_pod(
        "pi-launcher-x7k2q",
        controller=("batch/v1", "Job", "pi-launcher"),
        labels={**role, "training.kubeflow.org/job-role": "launcher"},
    )
    workers = [
        operator_pod(
            f"pi-worker-{i}",
            controller=("kubeflow.org/v2beta1", "MPIJob", "pi"),
            labels={**role, "training.kubeflow.org/job-role": "worker"},
        )
        for i in range(2)
    ]
    snapshot = cluster([launcher, *workers], [mpi])
    gang = resolve(snapshot, CONFIG).gangs[GangKey("ml", "MPIJob/pi")]
    assert (gang.min_member, len(gang.members)) == (3, 3)
    assert len(bound(snapshot)) == 3


def test_a_pytorchjob_is_all_of_its_replicas() -> None:
    job = owner(OwnerKind.PYTORCH_JOB, example("pytorchjob-simple.yaml", namespace="kubeflow"))
    pods = [
        operator_pod(
            f"pytorch-simple-{role}-0",
            namespace="kubeflow",
            controller=("kubeflow.org/v1", "PyTorchJob", "pytorch-simple"),
            labels={
                names.KUBEFLOW_OPERATOR: "pytorchjob-controller",
                names.KUBEFLOW_JOB_NAME: "pytorch-simple",
                "training.kubeflow.org/replica-type": role,
            },
        )
        for role in ("master", "worker")
    ]
    snapshot = cluster(pods, [job])
    gang = resolve(snapshot, CONFIG).gangs[GangKey("kubeflow", "PyTorchJob/pytorch-simple")]
    assert gang.min_member == 2
    assert gang.origin == "gang from PyTorchJob kubeflow/pytorch-simple: Master 1, Worker 1"
    assert len(bound(snapshot)) == 2


def spark_pod(app: str, role: str, name: str, *, cpu: str, memory: str) -> Pod:
    """A pod of a SparkApplication, labelled as the Spark Operator v2.3.0 has Spark label it
    (internal/controller/sparkapplication/submission.go), owned as its webhook makes it."""
    return pod_from_dict(
        {
            "metadata": {
                "name": name, "namespace": "ml", "uid": f"uid-{name}",
                "labels": {names.SPARK_APP_NAME: app, names.SPARK_LAUNCHED: "true",
                           names.SPARK_ROLE: role},
                "creationTimestamp": format_time(T0 - 60),
                "ownerReferences": [{"apiVersion": "sparkoperator.k8s.io/v1beta2",
                                     "kind": "SparkApplication", "name": app,
                                     "uid": f"uid-{app}", "controller": True}],
            },
            "spec": {"schedulerName": SCHEDULER, "containers": [
                {"name": "spark", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
            "status": {"phase": "Pending"},
        }
    )  # fmt: skip


def test_a_spark_driver_binds_only_when_there_is_room_for_it_and_its_executors() -> None:
    """The Spark Operator's own PodGroup: minMember 1 (the executors exist only once the
    driver runs) and minResources for the driver and its executors. spark-pi asks for 1 core
    and 512m each, one executor: 2 cpu and 2 x (512Mi + 384Mi overhead) in all."""
    app = owner(OwnerKind.SPARK_APPLICATION, example("sparkapplication-spark-pi.yaml"))
    assert app.min_resources == {"cpu": 2000, "memory": 2 * 896 * 2**20, "pods": 2}
    driver = spark_pod("spark-pi", "driver", "spark-pi-driver", cpu="1", memory="896Mi")
    room_for_the_driver_only = cluster([driver], [app], nodes=1, cpu="1")
    assert bound(room_for_the_driver_only) == set()
    messages = events(room_for_the_driver_only, "FailedScheduling")
    assert any("minResources needs {cpu: 2} in total" in m for m in messages), messages
    assert bound(cluster([driver], [app], nodes=2, cpu="1")) == {"spark-pi-driver"}
    gang = resolve(cluster([driver], [app]), CONFIG).gangs[
        GangKey("ml", "SparkApplication/spark-pi")
    ]
    assert (gang.min_member, gang.total) == (1, 1)
    assert "the driver and 1 executor" in gang.origin


def test_spark_executors_created_by_their_running_driver_join_its_gang_and_follow() -> None:
    app = owner(OwnerKind.SPARK_APPLICATION, example("sparkapplication-spark-pi.yaml"))
    driver = spark_pod("spark-pi", "driver", "spark-pi-driver", cpu="1", memory="896Mi")
    running = replace(driver, node_name="n0", phase="Running")
    executor = spark_pod("spark-pi", "executor", "spark-pi-exec-1", cpu="1", memory="896Mi")
    assert executor.gang is not None
    assert executor.gang.key == GangKey("ml", "SparkApplication/spark-pi")
    assert bound(cluster([running, executor], [app], nodes=2, cpu="1")) == {"spark-pi-exec-1"}


def test_a_spark_application_with_dynamic_allocation_counts_its_minimum_executors() -> None:
    app = owner(OwnerKind.SPARK_APPLICATION, example("sparkapplication-dynamic-allocation.yaml"))
    assert app.min_resources is not None
    assert app.min_resources["cpu"] == 2000  # the driver and minExecutors: 1


def test_a_malformed_spark_memory_is_an_error_that_names_the_field() -> None:
    body = example("sparkapplication-spark-pi.yaml")
    body["spec"]["executor"]["memory"] = "lots"
    assert owner(OwnerKind.SPARK_APPLICATION, body).errors == (
        "spec.executor.memory must be a JVM memory size such as 512m or 4g, got 'lots'",
    )


def test_preemption_never_leaves_a_running_jobset_replica_below_its_job() -> None:
    """A running replica of 4 at low priority, and a high-priority gang that needs the room
    of one of its pods: the whole replica goes, never 3 of its 4."""
    llama = jobset("llama", ("workers", 1, 4))
    replica = [
        replace(p, node_name="n0", phase="Running", priority=1)
        for p in jobset_pods("llama", "workers", 1, 4, cpu="2")
    ]
    urgent = [replace(p, priority=100) for p in job_pods("urgent", 1, cpu="2")]
    snapshot = cluster([*replica, *urgent], [llama, indexed_job("urgent", 1)], nodes=1)
    result = schedule(snapshot, now=T0)
    assert sorted(e.pod.name for e in result.evictions) == sorted(p.ref.name for p in replica)


def test_a_pod_that_names_a_gang_like_an_owners_cannot_join_or_spoil_it() -> None:
    """A gang name cannot hold "/", a gang from an owner's always does: a pod whose
    annotation says "Job/train" is an invalid gang of its own, and the Job's gang binds."""
    pods = job_pods("train", 2)
    stranger = replace(
        pod_from_dict(
            {
                "metadata": {"name": "stranger", "namespace": "ml", "uid": "uid-stranger",
                             "annotations": {names.KOORD_NAME: "Job/train"}},
                "spec": {"schedulerName": SCHEDULER, "containers": []},
            }
        ),
        created=T0,
    )  # fmt: skip
    assert stranger.gang is not None
    assert stranger.gang.key != GangKey("ml", "Job/train")
    assert bound(cluster([*pods, stranger], [indexed_job("train", 2)])) == {"train-0", "train-1"}


def test_pods_of_owners_that_make_no_gang_are_each_alone() -> None:
    replica = operator_pod("web-abc", controller=("apps/v1", "ReplicaSet", "web-5d4"))
    stateful = operator_pod("db-0", controller=("apps/v1", "StatefulSet", "db"))
    assert replica.gang is None
    assert stateful.gang is None


def test_explain_says_how_the_gang_was_formed() -> None:
    llama = jobset("llama", ("workers", 2, 2))
    pods = jobset_pods("llama", "workers", 2, 2)
    lines = explain(
        cluster(pods, [llama]), GangKey("ml", "JobSet/llama/workers-0"), now=T0, config=CONFIG
    )
    assert "gang from JobSet ml/llama: 1 replicated job (workers 2 x 2 pods), one gang" in lines
    assert "GangGroup: ml/JobSet/llama/workers-0, ml/JobSet/llama/workers-1" in lines


def test_explain_takes_a_pods_name_and_explains_its_gang() -> None:
    """Nobody types "ml/JobSet/llama/workers-0": the name of one of its pods will do."""
    llama = jobset("llama", ("workers", 2, 2))
    pods = jobset_pods("llama", "workers", 2, 2)
    lines = explain(
        cluster(pods, [llama]), GangKey("ml", "llama-workers-1-0"), now=T0, config=CONFIG
    )
    assert lines[0] == "pod ml/llama-workers-1-0 is in gang ml/JobSet/llama/workers-1"
    assert lines[1].startswith("gang ml/JobSet/llama/workers-1: min 2 of 2")
