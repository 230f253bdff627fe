"""A gang whose members are still being made says so on its PodGroup at once, and on its
pods only once its oldest member is MEMBERS_ARRIVING_SECONDS old: a controller makes a
gang's pods within seconds, and an Event on each while it does is noise."""

from __future__ import annotations

from scheduler.core.scheduling import schedule
from scheduler.core.session.readiness import MEMBERS_ARRIVING_SECONDS
from scheduler.model.decisions import Result
from tests.unit.builders import T0, gang_pods, node, podgroup, snapshot


def _said(result: Result, reason: str) -> list[str]:
    return [f"{e.regarding.kind}/{e.regarding.name}" for e in result.events if e.reason == reason]


def test_a_gang_whose_members_are_being_made_waits_without_an_event() -> None:
    pods = gang_pods("mpi", 3, pod_group="mpi", created=T0 - 1)
    result = schedule(
        snapshot([node("n0")], pods, podgroups=[podgroup("mpi", min_member=5)]), now=T0
    )
    assert _said(result, "GangWaiting") == []
    (update,) = result.status_updates
    assert update.status.conditions[-1].message == (
        "gang default/mpi has 3 of 5 members; waiting for 2 more"
    )
    assert result.wake_at == T0 - 1 + MEMBERS_ARRIVING_SECONDS, "a pass is due to say it"


def test_a_gang_still_short_once_its_oldest_member_is_five_seconds_old_is_told_why() -> None:
    pods = gang_pods("mpi", 3, pod_group="mpi", created=T0 - 1)
    world = snapshot([node("n0")], pods, podgroups=[podgroup("mpi", min_member=5)])
    first = schedule(world, now=T0)
    later = schedule(
        snapshot([node("n0")], pods, podgroups=[podgroup("mpi", min_member=5)],
                 memory=first.memory),
        now=T0 - 1 + MEMBERS_ARRIVING_SECONDS,
    )  # fmt: skip
    assert sorted(_said(later, "GangWaiting")) == [
        "Pod/mpi-0", "Pod/mpi-1", "Pod/mpi-2", "PodGroup/mpi",
    ]  # fmt: skip


def test_a_gang_group_waiting_for_a_gang_with_no_pods_yet_waits_without_an_event() -> None:
    group = ["team-a/part-a", "team-b/part-b"]
    a = gang_pods(
        "a", 2, namespace="team-a", gang="part-a", min_available=2, groups=group, created=T0
    )
    result = schedule(snapshot([node("n0", cpu="8")], a), now=T0)
    assert _said(result, "GangWaiting") == []
    assert result.bindings == ()


def test_a_gated_gang_is_told_at_once() -> None:
    """Gates are put there on purpose, and stay until whoever put them removes them."""
    gated = gang_pods(
        "g", 2, gang="g", min_available=3, created=T0,
        spec={"schedulingGates": [{"name": "example.com/quota"}]},
    )  # fmt: skip
    result = schedule(snapshot([node("n0")], gated), now=T0)
    assert sorted(_said(result, "SchedulingGated")) == ["Pod/g-0", "Pod/g-1"]
