"""Batch allocation, as bind maps: which pods land on which nodes in one pass."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.decisions import Result
from scheduler.model.pods import GangKey
from scheduler.model.snapshot import Snapshot
from tests.unit.builders import T0, gang_pods, node, pod, podgroup, snapshot


def bind_map(result: Result) -> dict[str, str]:
    return {b.pod.name: b.node for g in result.bindings for b in g.bindings}


def events(result: Result, reason: str) -> list[str]:
    return [e.message for e in result.events if e.reason == reason]


def run_passes(snap: Snapshot, *, times: list[float]) -> list[Result]:
    """Several passes, each fed the memory of the one before (as the loop does)."""
    results = []
    for now in times:
        result = schedule(snap, now=now)
        results.append(result)
        snap = replace(snap, memory=result.memory)
    return results


def test_gang_of_eight_binds_all_eight_in_one_pass() -> None:
    nodes = [node(f"n{i}", gpu=4) for i in range(2)]
    pods = gang_pods("train", 8, gang="train", min_available=8, gpu=1)
    result = schedule(snapshot(nodes, pods), now=T0)
    assert bind_map(result) == {f"train-{i}": "n0" if i < 4 else "n1" for i in range(8)}
    assert [g.all_or_nothing for g in result.bindings] == [True]


def test_gang_that_cannot_fit_binds_nothing_and_says_which_resource() -> None:
    nodes = [node("n0", gpu=4), node("n1", gpu=2)]
    pods = gang_pods("train", 4, gang="train", min_available=4, gpu=2)
    result = schedule(snapshot(nodes, pods), now=T0)
    assert bind_map(result) == {}
    failed = events(result, "FailedScheduling")
    assert len(failed) == 4
    assert "train-3: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu." in failed[0]
    assert "nothing was bound" in failed[0]


def test_third_gang_binds_nothing_when_only_two_fit() -> None:
    nodes = [node(f"n{i}", gpu=8) for i in range(2)]
    pods = [
        p
        for name, created in (("a", T0 - 30), ("b", T0 - 20), ("c", T0 - 10))
        for p in gang_pods(name, 4, gang=name, min_available=4, gpu=2, created=created)
    ]
    binds = bind_map(schedule(snapshot(nodes, pods), now=T0))
    assert sorted(binds) == [f"{g}-{i}" for g in "ab" for i in range(4)]


def test_older_gang_goes_first_and_higher_priority_goes_before_both() -> None:
    nodes = [node("n0", gpu=4)]
    old = gang_pods("old", 4, gang="old", min_available=4, gpu=1, created=T0 - 50)
    new = gang_pods("new", 4, gang="new", min_available=4, gpu=1, created=T0 - 10)
    assert set(bind_map(schedule(snapshot(nodes, new + old), now=T0))) == {p.ref.name for p in old}
    urgent = gang_pods("urgent", 4, gang="urgent", min_available=4, gpu=1, priority=100)
    chosen = set(bind_map(schedule(snapshot(nodes, old + urgent), now=T0)))
    assert chosen == {p.ref.name for p in urgent}


def test_spark_gang_binds_driver_and_one_executor_when_only_two_fit() -> None:
    nodes = [node("n0", cpu="4")]
    driver = pod("spark-driver", gang="spark", min_available=2, total=5, cpu="2", priority=10)
    executors = [
        pod(f"spark-exec-{i}", gang="spark", min_available=2, total=5, cpu="2") for i in range(4)
    ]
    result = schedule(snapshot(nodes, [*executors, driver]), now=T0)
    assert bind_map(result) == {"spark-driver": "n0", "spark-exec-0": "n0"}


def test_members_beyond_min_are_bound_in_the_same_pass_when_they_fit() -> None:
    nodes = [node("n0", cpu="8")]
    pods = gang_pods("job", 5, gang="job", min_available=2, cpu="1")
    assert len(bind_map(schedule(snapshot(nodes, pods), now=T0))) == 5


def test_pods_wait_for_their_podgroup_and_an_event_names_it() -> None:
    nodes = [node("n0")]
    pods = gang_pods("mpi", 2, pod_group="mpi")
    result = schedule(snapshot(nodes, pods), now=T0)
    assert bind_map(result) == {}
    assert events(result, "PodGroupNotFound")[0].startswith("waiting for PodGroup default/mpi")
    later = schedule(snapshot(nodes, pods, podgroups=[podgroup("mpi", min_member=2)]), now=T0)
    assert bind_map(later) == {"mpi-0": "n0", "mpi-1": "n0"}


def test_gang_with_fewer_pods_than_min_waits_and_says_how_many_are_missing() -> None:
    pods = gang_pods("mpi", 3, pod_group="mpi")
    result = schedule(
        snapshot([node("n0")], pods, podgroups=[podgroup("mpi", min_member=5)]), now=T0
    )
    assert bind_map(result) == {}
    assert events(result, "GangWaiting")[0] == (
        "gang default/mpi waits until all 5 members exist before it is tried"
    )
    (update,) = result.status_updates
    assert update.status.conditions[-1].message == (
        "gang default/mpi has 3 of 5 members; waiting for 2 more"
    )
    assert update.status.phase == "Pending"


def test_annotations_override_the_podgroup_min_member() -> None:
    pods = gang_pods("mpi", 2, pod_group="mpi", annotations={names.KOORD_MIN_AVAILABLE: "2"})
    result = schedule(
        snapshot([node("n0")], pods, podgroups=[podgroup("mpi", min_member=5)]), now=T0
    )
    assert len(bind_map(result)) == 2


def test_pods_of_another_scheduler_are_left_alone_but_their_usage_counts() -> None:
    nodes = [node("n0", gpu=8)]
    theirs = pod("theirs", scheduler="default-scheduler", gpu=6, node_name="n0", phase="Running")
    pending_theirs = pod("pending-theirs", scheduler="default-scheduler", gpu=1)
    ours = gang_pods("ours", 4, gang="ours", min_available=4, gpu=1)
    result = schedule(snapshot(nodes, [theirs, pending_theirs, *ours]), now=T0)
    assert bind_map(result) == {}
    assert "Insufficient nvidia.com/gpu" in events(result, "FailedScheduling")[0]


def test_finished_pods_free_their_node() -> None:
    nodes = [node("n0", gpu=8)]
    done = pod("done", gpu=8, node_name="n0", phase="Succeeded")
    ours = gang_pods("ours", 4, gang="ours", min_available=4, gpu=2)
    assert len(bind_map(schedule(snapshot(nodes, [done, *ours]), now=T0))) == 4


def test_pod_without_a_gang_is_a_gang_of_one() -> None:
    result = schedule(snapshot([node("n0")], [pod("lonely")]), now=T0)
    assert bind_map(result) == {"lonely": "n0"}


def test_nonstrict_gang_holds_what_fits_and_binds_once_the_rest_fits() -> None:
    pods = gang_pods("ns", 4, gang="ns", min_available=4, mode="NonStrict", gpu=4)
    first, second = run_passes(snapshot([node("n0", gpu=8)], pods), times=[T0, T0 + 1])
    assert bind_map(first) == {}
    assert len(first.memory[GangKey("default", "ns")].reservations) == 2
    assert bind_map(second) == {}  # nothing new fits
    # A second node appears: the two held members stay where they are, the rest go to n1.
    grown = snapshot([node("n0", gpu=8), node("n1", gpu=8)], pods, memory=second.memory)
    third = schedule(grown, now=T0 + 30)
    assert bind_map(third) == {"ns-0": "n0", "ns-1": "n0", "ns-2": "n1", "ns-3": "n1"}


def test_nonstrict_reservations_keep_gangs_behind_it_in_the_queue_off_the_held_capacity() -> None:
    held = gang_pods(
        "held", 4, gang="held", min_available=4, mode="NonStrict", gpu=4, created=T0 - 50
    )
    (first,) = run_passes(snapshot([node("n0", gpu=8)], held), times=[T0])
    younger = gang_pods("other", 2, gang="other", min_available=2, gpu=4, created=T0)
    second = schedule(
        snapshot([node("n0", gpu=8)], held + younger, memory=first.memory), now=T0 + 1
    )
    assert bind_map(second) == {}


def test_nonstrict_holds_follow_priority_so_the_higher_holder_completes() -> None:
    """Issue #12: holds were taken before queue order, so a low-priority NonStrict gang
    holding part of the room kept a high-priority one from completing, and both waited out
    their time. Now the high-priority gang takes the room it needs; the low one lets go of
    what it can no longer hold, and says so."""
    nodes = [node("n0", cpu="6")]
    blocker = pod("blocker", node_name="n0", phase="Running", cpu="3", priority=1000)

    def gang(name: str, priority: int, created: float) -> list:
        return [
            pod(f"{name}-{i}", gang=name, min_available=4, mode="NonStrict", cpu="1",
                priority=priority, created=created)
            for i in range(4)
        ]  # fmt: skip

    low, high = gang("low", 1, T0 - 50), gang("high", 100, T0 - 40)
    (first,) = run_passes(snapshot(nodes, [blocker, *low]), times=[T0])
    assert bind_map(first) == {}
    held = first.memory[GangKey("default", "low")].reservations
    assert len(held) == 3, "low holds the 3 cpu left"
    freed = schedule(snapshot(nodes, [*low, *high], memory=first.memory), now=T0 + 20)
    assert sorted(bind_map(freed)) == ["high-0", "high-1", "high-2", "high-3"]
    assert events(freed, "HoldReleased"), "the low gang says it let go"
    assert len(freed.memory[GangKey("default", "low")].reservations) == 2


def test_strict_gang_holds_nothing_between_passes() -> None:
    pods = gang_pods("s", 4, gang="s", min_available=4, gpu=4)
    result = schedule(snapshot([node("n0", gpu=8)], pods), now=T0)
    assert result.memory[GangKey("default", "s")].reservations == {}
    other = gang_pods("other", 2, gang="other", min_available=2, gpu=4, created=T0)
    later = schedule(
        snapshot([node("n0", gpu=8)], pods + other, memory=result.memory), now=T0 + 0.5
    )
    assert sorted(bind_map(later)) == ["other-0", "other-1"]


def test_gang_group_across_namespaces_binds_only_when_both_gangs_are_complete() -> None:
    group = ["team-a/part-a", "team-b/part-b"]
    a = gang_pods("a", 2, namespace="team-a", gang="part-a", min_available=2, groups=group)
    b = gang_pods("b", 2, namespace="team-b", gang="part-b", min_available=2, groups=group)
    nodes = [node("n0", cpu="8")]
    waiting = schedule(snapshot(nodes, a), now=T0)
    assert bind_map(waiting) == {}
    assert "waiting for gang team-b/part-b" in events(waiting, "GangWaiting")[0]
    both = schedule(snapshot(nodes, a + b), now=T0)
    assert sorted(bind_map(both)) == ["a-0", "a-1", "b-0", "b-1"]


def test_gang_group_binds_nothing_when_one_gang_does_not_fit() -> None:
    group = ["default/small", "default/big"]
    small = gang_pods("small", 2, gang="small", min_available=2, groups=group, cpu="1")
    big = gang_pods("big", 2, gang="big", min_available=2, groups=group, cpu="6")
    result = schedule(snapshot([node("n0", cpu="8")], small + big), now=T0)
    assert bind_map(result) == {}
    assert (
        "GangGroup [default/big, default/small] does not fit"
        in events(result, "FailedScheduling")[0]
    )


def test_gang_named_by_a_stranger_is_neither_held_nor_timed_out_by_it() -> None:
    """The hostage case: evil/x names prod/trainer in its groups and can never fit, with a
    short waiting-time; prod/trainer never named evil/x and binds as if it did not exist."""
    hostile = ["evil/x", "prod/trainer"]
    evil = gang_pods(
        "x", 2, namespace="evil", gang="x", min_available=2, groups=hostile,
        waiting_time="5s", gpu=16,
    )  # fmt: skip
    prod = gang_pods("t", 2, namespace="prod", gang="trainer", min_available=2, cpu="1")
    nodes = [node("n0", cpu="8", gpu=8)]
    first, later = run_passes(snapshot(nodes, evil + prod), times=[T0, T0 + 6])
    assert sorted(bind_map(first)) == ["t-0", "t-1"]
    message = events(first, "InvalidGangSpec")[0]
    assert "gang prod/trainer does not name evil/x back" in message
    assert all(patch.pod.namespace == "evil" for patch in later.pod_patches)


def test_gang_group_whose_gangs_name_different_groups_binds_neither() -> None:
    a = gang_pods("a", 1, gang="a", min_available=1, groups=["default/a", "default/b"])
    b = gang_pods("b", 1, gang="b", min_available=1, groups=["default/a", "default/b", "default/c"])
    result = schedule(snapshot([node("n0", cpu="8")], a + b), now=T0)
    assert bind_map(result) == {}
    said = " ".join(events(result, "InvalidGangSpec"))
    assert "gang default/b does not name default/a back" in said
    assert "gang default/a does not name default/b back" in said


def test_failed_gang_is_not_retried_before_its_backoff_ends() -> None:
    pods = gang_pods("g", 2, gang="g", min_available=2, gpu=8)
    first, early = run_passes(snapshot([node("n0", gpu=8)], pods), times=[T0, T0 + 0.5])
    assert first.memory[GangKey("default", "g")].retry_at == T0 + 1
    assert early.events == ()  # still backing off: no new attempt, no repeated event
    assert early.wake_at == T0 + 1


def test_timeout_marks_every_member_and_releases_held_capacity() -> None:
    pods = gang_pods(
        "slow", 4, gang="slow", min_available=4, mode="NonStrict", waiting_time="30s", gpu=4
    )
    passes = run_passes(snapshot([node("n0", gpu=8)], pods), times=[T0, T0 + 31])
    first, timed_out = passes
    assert len(first.memory[GangKey("default", "slow")].reservations) == 2
    assert {p.pod.name for p in timed_out.pod_patches} == {f"slow-{i}" for i in range(4)}
    assert all(p.annotations == {names.KOORD_TIMEOUT: "true"} for p in timed_out.pod_patches)
    assert timed_out.memory[GangKey("default", "slow")].reservations == {}
    assert "GangTimeout" in {e.reason for e in timed_out.events}
    # The capacity is free for the next gang in the same pass.
    nxt = gang_pods("next", 2, gang="next", min_available=2, gpu=4)
    after = schedule(
        snapshot([node("n0", gpu=8)], pods + nxt, memory=timed_out.memory), now=T0 + 32
    )
    assert sorted(bind_map(after)) == ["next-0", "next-1"]


def test_timed_out_pods_are_never_tried_again_even_after_a_restart() -> None:
    pods = gang_pods(
        "slow", 2, gang="slow", min_available=2, annotations={names.KOORD_TIMEOUT: "true"}
    )
    result = schedule(snapshot([node("n0")], pods), now=T0)
    assert bind_map(result) == {}


def test_after_gang_remaining_members_bind_one_by_one() -> None:
    bound = pod("job-0", gang="job", min_available=3, node_name="n0", phase="Running")
    rest = [pod(f"job-{i}", gang="job", min_available=3) for i in (1, 2)]
    result = schedule(snapshot([node("n0")], [bound, *rest]), now=T0)
    assert bind_map(result) == {"job-1": "n0", "job-2": "n0"}
    assert [g.all_or_nothing for g in result.bindings] == [False]


def test_gang_that_declares_a_total_waits_for_all_of_it_before_the_first_attempt() -> None:
    # Executors first, driver last: a first attempt on the executors alone would bind two
    # executors and leave the driver out.
    spark = {"gang": "spark", "min_available": 2, "total": 5, "cpu": "2"}
    executors = [pod(f"spark-exec-{i}", **spark) for i in range(4)]
    early = schedule(snapshot([node("n0", cpu="4")], executors), now=T0)
    assert bind_map(early) == {}
    assert "waits until all 5 members exist" in events(early, "GangWaiting")[0]
    driver = pod("spark-driver", priority=10, **spark)
    complete = schedule(snapshot([node("n0", cpu="4")], [*executors, driver]), now=T0)
    assert bind_map(complete) == {"spark-driver": "n0", "spark-exec-0": "n0"}


def test_nonstrict_holds_do_not_count_twice_toward_the_declared_total() -> None:
    """A held member is still a pending member: with one of four deleted, the gang has
    three, two of them held, and waits for the fourth rather than binding three."""
    ns = {"gang": "ns", "min_available": 3, "total": 4, "mode": "NonStrict", "gpu": 4}
    pods = [pod(f"ns-{i}", **ns) for i in range(4)]
    first = schedule(snapshot([node("n0", gpu=8)], pods), now=T0)
    held = first.memory[GangKey("default", "ns")].reservations
    assert len(held) == 2
    gone = next(p for p in pods if p.ref not in held)
    left = [p for p in pods if p is not gone]
    grown = [node("n0", gpu=8), node("n1", gpu=8)]
    second = schedule(snapshot(grown, left, memory=first.memory), now=T0 + 1)
    assert bind_map(second) == {}
    assert "waits until all 4 members exist" in events(second, "GangWaiting")[0]


def test_a_nonstrict_gang_short_of_its_total_lets_its_holds_go_for_others() -> None:
    """Its holds would stand idle until it timed out: a gang that fits there binds."""
    ns = {"gang": "ns", "min_available": 3, "total": 4, "mode": "NonStrict", "gpu": 4}
    pods = [pod(f"ns-{i}", **ns) for i in range(4)]
    first = schedule(snapshot([node("n0", gpu=8)], pods), now=T0)
    held = first.memory[GangKey("default", "ns")].reservations
    left = [p for p in pods if p.ref in held]  # both members not held are deleted
    other = pod("o-0", gang="o", min_available=1, gpu=8)
    second = schedule(
        snapshot([node("n0", gpu=8)], [*left, other], memory=first.memory), now=T0 + 1
    )
    assert bind_map(second) == {"o-0": "n0"}
    assert "has 2 of its 4 members" in events(second, "HoldReleased")[0]
    assert second.memory[GangKey("default", "ns")].reservations == {}


def test_explain_names_the_shape_the_room_and_what_a_pass_would_do() -> None:
    from scheduler.core.explaining import explain  # noqa: PLC0415
    from scheduler.model.config import Config  # noqa: PLC0415

    nodes = [node("n0", gpu=8), node("n1", gpu=4), node("tainted", gpu=8, taints=[
        {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}])]  # fmt: skip
    pods = gang_pods("big", 3, gang="big", min_available=3, gpu=4)
    lines = explain(snapshot(nodes, pods), GangKey("default", "big"), now=T0, config=Config())
    assert lines[0] == (
        "gang default/big: min 3 of 3, Strict, timeout 600s; 3 members, 0 bound, 3 pending"
    )
    assert lines[1].startswith(
        "needs 3×{cpu: 1, memory: 1Gi, nvidia.com/gpu: 4}: 2 of 3 nodes could take one, "  # noqa: RUF001
        "room for 3 in all; 1 node(s) had untolerated taint {dedicated: infra}"
    )
    assert lines[2] == "a pass now would bind 3 members: 2×n0, 1×n1"  # noqa: RUF001
    too_big = gang_pods("huge", 4, gang="huge", min_available=4, gpu=4)
    lines = explain(snapshot(nodes, too_big), GangKey("default", "huge"), now=T0, config=Config())
    assert "Insufficient nvidia.com/gpu" in lines[-1]
    assert lines[-1].startswith("a pass now: gang default/huge does not fit")


def test_a_gang_that_failed_thousands_of_times_still_backs_off_and_the_pass_goes_on() -> None:
    """Found by the simulator: the doubling overflowed a float after ~1,000 attempts (hours
    of waiting) and the pass raised."""
    from scheduler.model.config import Config  # noqa: PLC0415
    from scheduler.model.pods import GangKey  # noqa: PLC0415
    from scheduler.model.snapshot import GangState  # noqa: PLC0415

    assert Config().backoff(5000) == Config().max_backoff_seconds
    pods = gang_pods("g", 2, gang="g", min_available=2, gpu=8, created=T0)
    memory = {GangKey("default", "g"): GangState(attempts=5000, first_attempt=T0)}
    result = schedule(snapshot([node("n0", gpu=8)], pods, memory=memory), now=T0 + 1)
    assert bind_map(result) == {}
    assert result.memory[GangKey("default", "g")].attempts == 5001
