"""Gangs declared with the upstream Workload API (spec.schedulingGroup and a
scheduling.k8s.io/v1alpha2 PodGroup) and with Volcano's annotation and PodGroup: read, resolved
and given the status their own APIs define."""

from __future__ import annotations

import asyncio
from typing import Any

from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.gangs import read_claim
from scheduler.codecs.podgroups import (
    podgroup_from_dict,
    podgroup_status_to_dict,
    volcano_podgroup_from_dict,
    workload_podgroup_from_dict,
)
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.gangs import PodGroup, clip_message
from scheduler.model.pods import GangKey, GangSource, PodGroupApi
from scheduler.model.snapshot import PriorityClass
from scheduler.shell.api import ApiError
from scheduler.shell.syncing import wait_until_synced
from tests.unit.builders import SCHEDULER, T0, gang_pods, node, snapshot
from tests.unit.test_allocation import bind_map, events
from tests.unit.test_queue import Loop


def upstream(name: str, policy: dict[str, Any], **status: Any) -> PodGroup:
    return workload_podgroup_from_dict(
        {
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"schedulingPolicy": policy},
            "status": status,
        }
    )


def volcano(name: str, min_member: int, **spec: Any) -> PodGroup:
    return volcano_podgroup_from_dict(
        {
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-v{name}"},
            "spec": {"minMember": min_member, **spec},
        }
    )


def members(prefix: str, count: int, **kw: Any) -> list:
    return gang_pods(prefix, count, spec={"schedulingGroup": {"podGroupName": prefix}}, **kw)


def vc_members(prefix: str, count: int, **kw: Any) -> list:
    return gang_pods(prefix, count, annotations={names.VOLCANO_GROUP_NAME: prefix}, **kw)


def test_scheduling_group_is_a_claim_on_an_upstream_podgroup() -> None:
    claim = read_claim({}, {}, namespace="ns", scheduling_group={"podGroupName": "train"})
    assert claim is not None
    assert claim.key == GangKey("ns", "train")
    assert claim.source is GangSource.WORKLOAD
    assert claim.source.api is PodGroupApi.WORKLOAD
    assert claim.errors == ()


def test_a_label_or_annotation_of_ours_wins_over_a_scheduling_group_a_controller_filled_in() -> (
    None
):
    """1.37's Job controller (WorkloadWithJob) puts every Job's pods in a PodGroup of its
    own; a gang the pod template declares to us is still the pods' gang."""
    for labels, notes, source in (
        ({names.POD_GROUP_LABEL: "other"}, {}, GangSource.POD_GROUP),
        ({}, {names.KOORD_NAME: "other"}, GangSource.KOORDINATOR),
        ({names.SAKKARA_GROUP_NAME: "other"}, {}, GangSource.SAKKARA),
        ({}, {names.VOLCANO_GROUP_NAME: "other"}, GangSource.VOLCANO),
    ):
        claim = read_claim(
            labels, notes, namespace="ns", scheduling_group={"podGroupName": "train-pg"}
        )
        assert claim is not None
        assert (claim.key, claim.source) == (GangKey("ns", "other"), source)


def test_scheduling_group_without_a_name_is_an_error_naming_the_field() -> None:
    claim = read_claim({}, {}, namespace="ns", scheduling_group={"podGroupName": 5})
    assert claim is not None
    assert claim.errors[0].startswith("spec.schedulingGroup.podGroupName: gang name ''")


def test_volcano_annotation_is_a_claim_on_a_volcano_podgroup() -> None:
    claim = read_claim({}, {names.VOLCANO_GROUP_NAME: "job"}, namespace="ns")
    assert claim is not None
    assert claim.source is GangSource.VOLCANO
    assert claim.source.api is PodGroupApi.VOLCANO


def test_upstream_gang_binds_whole_or_not_at_all() -> None:
    pods = members("train", 4, cpu="1")
    group = upstream("train", {"gang": {"minCount": 4}})
    small = schedule(snapshot([node("n0", cpu="3")], pods, podgroups=[group]), now=T0)
    assert bind_map(small) == {}
    (update,) = small.status_updates
    assert update.api is PodGroupApi.WORKLOAD
    (condition,) = update.status.conditions
    assert (condition.type, condition.status, condition.reason) == (
        "PodGroupScheduled",
        "False",
        "Unschedulable",
    )
    roomy = schedule(snapshot([node("n0", cpu="4")], pods, podgroups=[group]), now=T0)
    assert len(bind_map(roomy)) == 4
    (update,) = roomy.status_updates
    assert [(c.status, c.reason) for c in update.status.conditions] == [("True", "Scheduled")]


def test_upstream_condition_never_goes_back_from_true_to_false() -> None:
    """kube-scheduler's rule: once scheduled, a later failure (more members) says nothing."""
    scheduled = {
        "type": "PodGroupScheduled",
        "status": "True",
        "reason": "Scheduled",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    group = upstream("train", {"gang": {"minCount": 1}}, conditions=[scheduled])
    pods = members("train", 2, cpu="8")
    result = schedule(snapshot([node("n0", cpu="4")], pods, podgroups=[group]), now=T0)
    assert bind_map(result) == {}
    assert result.status_updates == ()


def test_upstream_basic_group_places_pod_by_pod() -> None:
    pods = members("web", 3, cpu="1")
    group = upstream("web", {"basic": {}})
    assert group.basic
    assert group.min_member == 1
    result = schedule(snapshot([node("n0", cpu="2")], pods, podgroups=[group]), now=T0)
    assert len(bind_map(result)) == 2


def test_upstream_podgroup_with_an_invalid_policy_keeps_its_pods_waiting_and_says_why() -> None:
    pods = members("bad", 2)
    group = upstream("bad", {"gang": {"minCount": 0}})
    result = schedule(snapshot([node("n0")], pods, podgroups=[group]), now=T0)
    assert bind_map(result) == {}
    (message,) = set(events(result, "InvalidGangSpec"))
    assert "spec.schedulingPolicy.gang.minCount must be a whole number from 1" in message
    assert "got 0" in message


def test_a_podgroup_of_another_kind_with_the_same_name_is_not_the_gangs() -> None:
    ours = podgroup_from_dict({"metadata": {"name": "mpi", "namespace": "default"}})
    pods = members("mpi", 2)
    result = schedule(snapshot([node("n0")], pods, podgroups=[ours]), now=T0)
    assert bind_map(result) == {}
    (message,) = set(events(result, "PodGroupNotFound"))
    assert message.startswith("waiting for PodGroup default/mpi (scheduling.k8s.io)")


def test_the_cache_keeps_each_kind_apart_and_hands_the_gang_the_kind_its_pods_name() -> None:
    cache = ClusterCache(scheduler_name=SCHEDULER)
    cache.upsert_podgroup(podgroup_from_dict({"metadata": {"name": "g", "namespace": "default"}}))
    cache.upsert_podgroup(volcano("g", 3))
    for pod in vc_members("g", 3):
        cache.upsert_pod(pod)
    assert cache.snapshot(whole=True).podgroups[GangKey("default", "g")].api is PodGroupApi.VOLCANO
    cache.remove_podgroup(GangKey("default", "g"), PodGroupApi.VOLCANO)
    assert cache.snapshot(whole=True).podgroups[GangKey("default", "g")].api is PodGroupApi.OURS


def test_volcano_gang_gets_volcanos_phase_counts_and_conditions() -> None:
    pods = vc_members("job", 3, cpu="1")
    group = volcano("job", 3)
    failed = schedule(snapshot([node("n0", cpu="2")], pods, podgroups=[group]), now=T0)
    (update,) = failed.status_updates
    assert update.api is PodGroupApi.VOLCANO
    assert update.status.phase == "Inqueue"
    (condition,) = update.status.conditions
    assert (condition.type, condition.status, condition.reason) == (
        "Unschedulable",
        "True",
        "NotEnoughResources",
    )
    placed = schedule(snapshot([node("n0", cpu="3")], pods, podgroups=[group]), now=T0)
    (update,) = placed.status_updates
    assert update.status.phase == "Running"
    assert [(c.type, c.status, c.reason) for c in update.status.conditions] == [
        ("Scheduled", "True", "tasks in gang are ready to be scheduled")
    ]


def test_volcano_gang_waiting_for_members_says_not_enough_tasks() -> None:
    pods = vc_members("job", 2)
    result = schedule(snapshot([node("n0")], pods, podgroups=[volcano("job", 3)]), now=T0)
    (update,) = result.status_updates
    assert update.status.conditions[0].reason == "NotEnoughTasks"


def test_volcano_priority_class_orders_the_gang() -> None:
    """Two gangs for one node's room: the one whose PodGroup names the higher class goes."""
    classes = [PriorityClass("high", 1000)]
    low = vc_members("low", 2, cpu="1", created=T0 - 500)
    high = vc_members("high", 2, cpu="1", created=T0 - 10)
    groups = [volcano("low", 2), volcano("high", 2, priorityClassName="high")]
    snap = snapshot(
        [node("n0", cpu="2")], [*low, *high], podgroups=groups, priority_classes=classes
    )
    assert set(bind_map(schedule(snap, now=T0))) == {"high-0", "high-1"}


class _Server:
    """An API server that serves neither the upstream v1alpha2 API nor Volcano's CRD."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def request(self, method: str, path: str, **_: Any) -> dict:
        self.asked.append(path)
        if "/scheduling.k8s.io/v1alpha2/" in path or "/scheduling.volcano.sh/" in path:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return {"items": [], "metadata": {}}


def test_a_podgroup_kind_the_server_does_not_serve_neither_stalls_nor_fails_the_sync() -> None:
    server = _Server()
    cache = ClusterCache(scheduler_name=SCHEDULER)
    asyncio.run(asyncio.wait_for(wait_until_synced(server, cache), timeout=5))  # type: ignore[arg-type]
    assert cache.synced
    assert any("/scheduling.volcano.sh/v1beta1/podgroups" in p for p in server.asked)
    assert any("/scheduling.k8s.io/v1alpha2/podgroups" in p for p in server.asked)


def test_an_upstream_condition_message_is_cut_to_the_api_servers_limit_in_bytes() -> None:
    assert clip_message("é" * 20000) == "é" * 16384
    assert clip_message("ok") == "ok"


def test_an_upstream_gang_keeps_its_clock_on_its_pods() -> None:
    """The upstream PodGroup has no field for the first attempt (ours has
    scheduleStartTime): a gang that has to wait marks its pods, so a restart does not
    restart its timeout."""
    pods = members("train", 2, cpu="8")
    group = upstream("train", {"gang": {"minCount": 2}})
    result = schedule(snapshot([node("n0", cpu="4")], pods, podgroups=[group]), now=T0)
    marked = {p.pod.name for p in result.pod_patches if names.FIRST_ATTEMPT in p.annotations}
    assert marked == {"train-0", "train-1"}


def test_upstream_spec_priority_orders_the_gang() -> None:
    def spec_priority(name: str, priority: int) -> PodGroup:
        return workload_podgroup_from_dict(
            {
                "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "priority": priority},
            }
        )

    old = members("old", 2, cpu="1", created=T0 - 500)
    urgent = members("urgent", 2, cpu="1", created=T0 - 10)
    groups = [spec_priority("old", 0), spec_priority("urgent", 100)]
    snap = snapshot([node("n0", cpu="2")], [*old, *urgent], podgroups=groups)
    assert set(bind_map(schedule(snap, now=T0))) == {"urgent-0", "urgent-1"}


def test_starvation_after_is_read_from_podgroups_of_every_kind() -> None:
    meta = {"name": "g", "namespace": "default", "annotations": {names.STARVATION_AFTER: "30s"}}
    assert podgroup_from_dict({"metadata": meta}).starvation_seconds == 30
    assert volcano_podgroup_from_dict({"metadata": meta, "spec": {}}).starvation_seconds == 30
    gang = {"schedulingPolicy": {"gang": {"minCount": 2}}}
    assert workload_podgroup_from_dict({"metadata": meta, "spec": gang}).starvation_seconds == 30


def test_a_parked_volcano_gang_is_not_tried_again_for_the_status_we_wrote() -> None:
    """Volcano's CRD has no status subresource: our status write bumps the generation."""

    def written(generation: int, status: dict) -> PodGroup:
        return volcano_podgroup_from_dict(
            {"metadata": {"name": "g", "namespace": "default", "uid": "u",
                          "generation": generation},
             "spec": {"minMember": 2}, "status": status}
        )  # fmt: skip

    loop = Loop(*vc_members("g", 2, cpu="3"), nodes=[node("n0", cpu="4")])
    loop.cache.upsert_podgroup(written(1, {}))
    first = loop.run(T0)
    assert first.attempts, "tried, and it does not fit"
    body = podgroup_status_to_dict(first.status_updates[0].status, PodGroupApi.VOLCANO)
    loop.cache.upsert_podgroup(written(2, body))
    assert not loop.run(T0 + 20).attempts, "our own status write is no change that helps it"


def test_only_our_condition_is_sent_and_an_unchanged_status_is_not_written_again() -> None:
    foreign = {"type": "Foreign", "status": "True", "reason": "R", "message": "m",
               "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    ours = {"type": names.UPSTREAM_SCHEDULED, "status": "False", "reason": "Unschedulable",
            "message": "x", "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    pg = upstream("g", {"gang": {"minCount": 2}}, conditions=[ours, foreign])
    result = schedule(snapshot([node("n0", cpu="2")], members("g", 2, cpu="2"), podgroups=[pg]),
                      now=T0)  # fmt: skip
    (update,) = result.status_updates
    sent = podgroup_status_to_dict(update.status, PodGroupApi.WORKLOAD)["conditions"]
    assert [c["type"] for c in sent if "$patch" not in c] == [names.UPSTREAM_SCHEDULED], (
        "other writers' are theirs"
    )
    # The API server keeps the order it had: the next pass finds nothing to write.
    kept = upstream("g", {"gang": {"minCount": 2}}, conditions=[sent[0], foreign])
    again = schedule(
        snapshot([node("n0", cpu="2")], members("g", 2, cpu="2"), podgroups=[kept],
                 memory=result.memory),
        now=T0 + 30,
    )  # fmt: skip
    assert again.status_updates == ()
