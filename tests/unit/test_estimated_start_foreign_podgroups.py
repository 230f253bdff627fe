"""A waiting gang whose PodGroup is not ours (the upstream scheduling.k8s.io one, Volcano's)
says when it is expected to start too, in a condition of our own type
(gang-scheduler.io/EstimatedStart) beside the conditions its kind defines; once placed, the
condition goes (on the upstream PodGroup by a strategic merge's delete directive, as that
merge keeps what it is not told to remove)."""

from __future__ import annotations

from dataclasses import replace

from scheduler.codecs.podgroups import podgroup_status_to_dict
from scheduler.core.forecasting import forecast
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.gangs import Condition, PodGroup, PodGroupStatus
from scheduler.model.pods import GangKey, PodGroupApi
from scheduler.model.times import format_time
from tests.unit.builders import T0, gang_pods, node, snapshot
from tests.unit.test_upstream_gangs import members, upstream, vc_members, volcano

CONFIG = Config(default_timeout_seconds=1e9)
TRAIN = GangKey("default", "train")
OURS = names.FOREIGN_ESTIMATED_START


def _cluster(group: PodGroup, *, waiting: list, runs_for: str = "10m"):
    """r (4 x 2 cpu, ``runs_for``) fills n0; train (4 x 2 cpu, ``group``) waits for it."""
    running = [
        replace(p, node_name="n0", phase="Running", started=T0)
        for p in gang_pods(
            "r",
            4,
            gang="r",
            min_available=4,
            cpu="2",
            annotations={names.EXPECTED_DURATION: runs_for},
        )
    ]
    return snapshot([node("n0", cpu="8")], [*running, *waiting], podgroups=[group])


def _update(snap, *, forecast_first: bool = True):
    if forecast_first:
        snap = replace(snap, forecast=forecast(snap, now=T0, config=CONFIG))
    result = schedule(snap, now=T0, config=CONFIG)
    (update,) = [u for u in result.status_updates if u.gang == TRAIN]
    return update


def _said(status: PodGroupStatus) -> Condition | None:
    return next((c for c in status.conditions if c.type == OURS), None)


def test_a_waiting_upstream_gang_says_when_it_expects_to_start_beside_its_own_condition() -> None:
    group = upstream("train", {"gang": {"minCount": 4}})
    update = _update(_cluster(group, waiting=members("train", 4, cpu="2")))
    said = _said(update.status)
    assert said is not None
    assert (said.status, said.reason) == ("True", "Estimated")
    assert said.message.startswith(f"expected to start at {format_time(T0 + 600)}")
    assert "once default/r ended" in said.message
    sent = podgroup_status_to_dict(update.status, PodGroupApi.WORKLOAD)["conditions"]
    assert [c["type"] for c in sent] == [names.UPSTREAM_SCHEDULED, OURS]
    assert all("$patch" not in c for c in sent)


def test_a_placed_upstream_gang_has_its_estimate_deleted_by_a_directive() -> None:
    old = {"type": OURS, "status": "True", "reason": "Estimated", "message": "expected ...",
           "lastTransitionTime": format_time(T0 - 60)}  # fmt: skip
    group = upstream("train", {"gang": {"minCount": 4}}, conditions=[old])
    snap = _cluster(group, waiting=members("train", 4, cpu="2"))
    emptied = replace(snap, pods=tuple(p for p in snap.pods if not p.ref.name.startswith("r-")))
    update = _update(emptied)
    assert _said(update.status) is None
    sent = podgroup_status_to_dict(update.status, PodGroupApi.WORKLOAD)["conditions"]
    assert {"type": OURS, "$patch": "delete"} in sent
    assert [c["type"] for c in sent if "$patch" not in c] == [names.UPSTREAM_SCHEDULED]


def test_an_upstream_status_without_an_estimate_says_to_delete_one_the_cache_may_not_show_yet() -> (
    None
):
    """The estimate's write may still be on its way when the pass that places the gang runs:
    the cache shows no estimate, yet the write that follows must take it off."""
    group = upstream("train", {"gang": {"minCount": 4}})
    snap = _cluster(group, waiting=members("train", 4, cpu="2"))
    emptied = replace(snap, pods=tuple(p for p in snap.pods if not p.ref.name.startswith("r-")))
    update = _update(emptied, forecast_first=False)
    assert _said(update.status) is None
    sent = podgroup_status_to_dict(update.status, PodGroupApi.WORKLOAD)["conditions"]
    assert {"type": OURS, "$patch": "delete"} in sent


def test_a_waiting_volcano_gang_says_it_beside_volcanos_unschedulable() -> None:
    group = volcano("train", 4)
    update = _update(_cluster(group, waiting=vc_members("train", 4, cpu="2")))
    said = _said(update.status)
    assert said is not None
    assert (said.status, said.reason) == ("True", "Estimated")
    sent = podgroup_status_to_dict(update.status, PodGroupApi.VOLCANO)["conditions"]
    assert {c["type"] for c in sent} == {"Unschedulable", OURS}


def test_a_placed_volcano_gang_drops_its_estimate_from_the_list_it_writes_whole() -> None:
    old = Condition(OURS, "True", "Estimated", "expected ...", format_time(T0 - 60))
    group = replace(volcano("train", 4), status=PodGroupStatus(conditions=(old,)))
    snap = _cluster(group, waiting=vc_members("train", 4, cpu="2"))
    emptied = replace(snap, pods=tuple(p for p in snap.pods if not p.ref.name.startswith("r-")))
    update = _update(emptied)
    sent = podgroup_status_to_dict(update.status, PodGroupApi.VOLCANO)["conditions"]
    assert OURS not in {c["type"] for c in sent}
    assert "Scheduled" in {c["type"] for c in sent}


def test_the_members_of_an_upstream_gang_carry_no_mark_and_lose_an_old_one() -> None:
    """Before its PodGroup said the estimate, such a gang said it on its first waiting pod
    (gang-scheduler.io/expected-start): that mark is taken off, and none is written."""
    group = upstream("train", {"gang": {"minCount": 4}})
    waiting = members("train", 4, cpu="2")
    waiting[0] = replace(waiting[0], expected_start=format_time(T0 + 600))
    snap = _cluster(group, waiting=waiting)
    result = schedule(replace(snap, forecast=forecast(snap, now=T0, config=CONFIG)), now=T0)
    marks = {
        p.pod.name: p.annotations[names.EXPECTED_START]
        for p in result.pod_patches
        if names.EXPECTED_START in p.annotations
    }
    assert marks == {waiting[0].ref.name: None}
