"""Gang incarnations, GangGroup commit points and the PodGroup status that people read."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.explaining import explain
from scheduler.core.scheduling import schedule
from scheduler.core.statuses import MIN_MEMBER_AVAILABLE
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.pods import GangKey
from scheduler.model.snapshot import GangState
from scheduler.model.times import format_time
from tests.unit.builders import T0, gang_pods, node, pod, podgroup, snapshot
from tests.unit.test_allocation import bind_map, events, run_passes

TRAIN = GangKey("default", "train")


def _status(result, key=TRAIN):
    return next(u.status for u in result.status_updates if u.gang == key)


def _condition(status, kind="Scheduled"):
    return next(c for c in status.conditions if c.type == kind)


def test_recreated_job_pods_bind_nothing_while_only_half_of_them_fit() -> None:
    # The first incarnation ran and failed on n0; a Job made four new pods; 2 cpu are free.
    failed = gang_pods("old", 4, pod_group="train", node_name="n0", phase="Failed")
    busy = pod("other", scheduler="default-scheduler", node_name="n0", cpu="2")
    fresh = gang_pods("new", 4, pod_group="train")
    snap = snapshot(
        [node("n0", cpu="4")], [*failed, busy, *fresh], podgroups=[podgroup("train", min_member=4)]
    )
    result = schedule(snap, now=T0)
    assert bind_map(result) == {}
    assert "nothing was bound" in events(result, "FailedScheduling")[0]


def test_recreated_job_pods_bind_whole_once_they_all_fit() -> None:
    failed = gang_pods("old", 4, pod_group="train", node_name="n0", phase="Failed")
    fresh = gang_pods("new", 4, pod_group="train")
    snap = snapshot(
        [node("n0", cpu="4")], [*failed, *fresh], podgroups=[podgroup("train", min_member=4)]
    )
    result = schedule(snap, now=T0)
    assert sorted(bind_map(result)) == [f"new-{i}" for i in range(4)]
    assert [g.all_or_nothing for g in result.bindings] == [True]


def test_member_recreated_while_the_others_run_is_placed_on_its_own() -> None:
    running = gang_pods("w", 3, pod_group="train", node_name="n0", phase="Running")
    replacement = pod("w-3", pod_group="train")
    snap = snapshot(
        [node("n0", cpu="8")], [*running, replacement], podgroups=[podgroup("train", min_member=4)]
    )
    result = schedule(snap, now=T0)
    assert bind_map(result) == {"w-3": "n0"}
    assert [g.all_or_nothing for g in result.bindings] == [False]


def test_a_new_incarnation_forgets_the_timeout_of_the_last() -> None:
    # Memory of an incarnation that ran (satisfied), and long ago started its clock.
    old = GangState(first_attempt=T0 - 10_000, satisfied=True, timed_out=True)
    failed = gang_pods("old", 2, gang="train", min_available=2, node_name="n0", phase="Failed")
    fresh = gang_pods("new", 2, gang="train", min_available=2)
    snap = snapshot([node("n0")], [*failed, *fresh], memory={TRAIN: old})
    result = schedule(snap, now=T0)
    assert sorted(bind_map(result)) == ["new-0", "new-1"]
    assert not events(result, "GangTimeout")


def test_podgroup_created_anew_under_the_same_name_starts_a_fresh_clock() -> None:
    remembered = GangState(first_attempt=T0 - 10_000, podgroup_uid="uid-of-the-deleted-one")
    pods = gang_pods("m", 2, pod_group="train", cpu="6")
    snap = snapshot(
        [node("n0")],
        pods,
        podgroups=[podgroup("train", min_member=2, timeout=60)],
        memory={TRAIN: remembered},
    )
    result = schedule(snap, now=T0)
    assert not events(result, "GangTimeout")
    assert result.memory[TRAIN].first_attempt == T0


def test_pods_created_anew_under_the_same_names_do_not_inherit_a_timeout() -> None:
    remembered = GangState(first_attempt=T0 - 10_000, timed_out=True, members=frozenset({"x"}))
    pods = gang_pods("m", 2, gang="train", min_available=2)
    result = schedule(snapshot([node("n0")], pods, memory={TRAIN: remembered}), now=T0)
    assert sorted(bind_map(result)) == ["m-0", "m-1"]


def test_gang_group_is_one_commit_point() -> None:
    group = ["default/a", "default/b"]
    a = gang_pods("a", 2, gang="a", min_available=2, groups=group)
    b = gang_pods("b", 2, gang="b", min_available=2, groups=group)
    result = schedule(snapshot([node("n0")], [*a, *b]), now=T0)
    (commit,) = result.bindings
    assert commit.all_or_nothing
    assert commit.keys == (GangKey("default", "a"), GangKey("default", "b"))
    assert len(commit.bindings) == 4


def test_half_bound_gang_group_gets_its_other_gang_placed_whole() -> None:
    # A crash after gang a's binds: a is bound, b is not. b is not "waiting for members".
    group = ["default/a", "default/b"]
    a = gang_pods("a", 2, gang="a", min_available=2, groups=group, node_name="n0")
    b = gang_pods("b", 2, gang="b", min_available=2, groups=group)
    result = schedule(snapshot([node("n0")], [*a, *b]), now=T0)
    assert bind_map(result) == {"b-0": "n0", "b-1": "n0"}
    assert not events(result, "GangWaiting")
    (commit,) = result.bindings
    assert commit.all_or_nothing
    assert commit.keys == (GangKey("default", "b"),)


def test_podgroup_whose_members_all_failed_is_failed() -> None:
    failed = gang_pods("m", 3, pod_group="train", node_name="n0", phase="Failed")
    pg = podgroup("train", min_member=3, status={"phase": "Scheduled"})
    result = schedule(snapshot([node("n0")], failed, podgroups=[pg]), now=T0)
    assert _status(result).phase == "Failed"


def test_podgroup_with_one_failed_member_and_the_rest_running_is_failed() -> None:
    running = gang_pods("m", 2, pod_group="train", node_name="n0", phase="Running")
    failed = pod("m-2", pod_group="train", node_name="n0", phase="Failed")
    pg = podgroup("train", min_member=3, status={"phase": "Running"})
    result = schedule(snapshot([node("n0")], [*running, failed], podgroups=[pg]), now=T0)
    assert _status(result).phase == "Failed"


def test_backing_off_gang_keeps_the_reason_of_its_last_attempt() -> None:
    pods = gang_pods("m", 2, pod_group="train", cpu="6")
    pg = podgroup("train", min_member=2)
    first, during_backoff = run_passes(
        snapshot([node("n0")], pods, podgroups=[pg]), times=[T0, T0 + 0.1]
    )
    said = _condition(_status(first))
    assert said.reason == "Unschedulable"
    assert "Insufficient cpu" in said.message
    # While it backs off, the pass has nothing new to say: the status stays as written.
    written = replace(pg, status=_status(first))
    again = schedule(
        snapshot([node("n0")], pods, podgroups=[written], memory=first.memory), now=T0 + 0.1
    )
    assert not again.status_updates
    assert during_backoff.memory[TRAIN].condition == first.memory[TRAIN].condition


def test_running_gang_below_min_member_says_so_once_on_its_podgroup() -> None:
    running = gang_pods("m", 2, pod_group="train", node_name="n0", phase="Running")
    failed = gang_pods("f", 2, pod_group="train", node_name="n0", phase="Failed")
    pg = podgroup("train", min_member=4)
    first, second = run_passes(
        snapshot([node("n0")], [*running, *failed], podgroups=[pg]), times=[T0, T0 + 1]
    )
    (said,) = [e for e in first.events if e.reason == "Unschedulable"]
    assert said.regarding.kind == "PodGroup"
    assert "fewer than its minMember 4" in said.message
    assert not [e for e in second.events if e.reason == "Unschedulable"]
    condition = _condition(_status(first), MIN_MEMBER_AVAILABLE)
    assert (condition.status, condition.reason) == ("False", "BelowMinMember")


def test_annotation_gang_that_waits_writes_its_first_attempt_on_its_pods() -> None:
    pods = gang_pods("m", 2, gang="train", min_available=2, cpu="6")
    result = schedule(snapshot([node("n0")], pods), now=T0)
    marks = {p.pod.name: p.annotations[names.FIRST_ATTEMPT] for p in result.pod_patches}
    assert marks == {"m-0": format_time(T0), "m-1": format_time(T0)}


def test_restarted_scheduler_reads_the_first_attempt_back_and_times_out_on_time() -> None:
    mark = {names.FIRST_ATTEMPT: format_time(T0 - 100)}
    pods = gang_pods("m", 2, gang="train", min_available=2, cpu="6", waiting_time="60s")
    pods = [
        pod(
            p.ref.name, gang="train", min_available=2, cpu="6", waiting_time="60s", annotations=mark
        )
        for p in pods
    ]
    result = schedule(snapshot([node("n0")], pods), now=T0)
    assert events(result, "GangTimeout")


def test_timed_out_pods_replaced_one_by_one_become_a_new_incarnation() -> None:
    kw = {"gang": "train", "min_available": 3, "cpu": "1", "waiting_time": "10s"}
    old = gang_pods("old", 3, **kw)
    _, timed_out = run_passes(snapshot([node("n0", cpu="2")], old), times=[T0, T0 + 11])
    assert events(timed_out, "GangTimeout")
    marked = [pod(p.ref.name, annotations={names.KOORD_TIMEOUT: "true"}, **kw) for p in old]
    # A Job replaces them one at a time, on a node that now has room.
    fresh = [pod(f"new-{i}", created=T0 + 15 + i, **kw) for i in range(3)]
    memory = timed_out.memory
    for i in range(3):
        pods = marked[i + 1 :] + fresh[: i + 1]
        result = schedule(snapshot([node("n0", cpu="8")], pods, memory=memory), now=T0 + 20 + i)
        memory = result.memory
        marks = {p.pod.name for p in result.pod_patches if names.KOORD_TIMEOUT in p.annotations}
        assert not marks & {p.ref.name for p in fresh}, marks
    assert sorted(bind_map(result)) == ["new-0", "new-1", "new-2"]


def test_finished_gang_is_not_said_to_wait_for_members() -> None:
    done = gang_pods("w", 2, pod_group="train", node_name="n0", phase="Succeeded")
    pg = podgroup("train", min_member=2)
    first, second = run_passes(snapshot([node("n0")], done, podgroups=[pg]), times=[T0, T0 + 1])
    assert not events(first, "GangWaiting")
    assert not events(second, "GangWaiting")
    assert _status(first).phase == "Finished"


def test_podgroup_whose_new_incarnation_waits_is_scheduling_not_failed() -> None:
    failed = gang_pods("old", 2, pod_group="train", node_name="n0", phase="Failed")
    fresh = gang_pods("new", 2, pod_group="train", cpu="6")
    pg = podgroup("train", min_member=2, status={"phase": "Failed"})
    result = schedule(snapshot([node("n0")], [*failed, *fresh], podgroups=[pg]), now=T0)
    assert _status(result).phase == "Scheduling"


def test_a_gang_cut_short_by_a_crash_gets_its_room_before_older_gangs() -> None:
    """The scheduler died after binding 1 of a Strict gang's 3 members; after the restart
    an older gang is waiting for the same room. The cut-short gang is completed first: it
    already holds part of the cluster, and its commit had room for the rest."""
    nodes = [node("n0", cpu="3")]
    first = replace(
        pod(
            "young-0",
            gang="young",
            min_available=3,
            created=T0 - 10,
            annotations={names.BOUND_BY: "gang-scheduler"},
        ),
        node_name="n0",
        phase="Running",
    )
    rest = [pod(f"young-{i}", gang="young", min_available=3, created=T0 - 10) for i in (1, 2)]
    older = gang_pods("old", 2, gang="old", min_available=2, created=T0 - 500)
    result = schedule(snapshot(nodes, [first, *rest, *older]), now=T0)
    assert sorted(b.pod.name for g in result.bindings for b in g.bindings) == [
        "young-1",
        "young-2",
    ]


def test_a_gang_cut_short_whose_bound_members_succeeded_binds_its_rest_together() -> None:
    """Chaos seed 5035: the leader bound 4 of a Strict Job gang's 7 members and was killed;
    the 4 ran and Succeeded before a new leader came. A Job makes no member that succeeded
    again, so the 3 pending ones are all it will ever have: they count the 4 toward the
    minimum (Volcano's ReadyTaskNum) and are bound together."""
    done = gang_pods("j0", 4, gang="j0", min_available=7, node_name="n0", phase="Succeeded")
    rest = [pod(f"j0-{i}", gang="j0", min_available=7) for i in (4, 5, 6)]
    snap = snapshot([node("n0", cpu="3")], [*done, *rest])
    result = schedule(snap, now=T0)
    assert sorted(bind_map(result)) == ["j0-4", "j0-5", "j0-6"]
    assert [g.all_or_nothing for g in result.bindings] == [True]
    assert not events(result, "GangWaiting")
    assert explain(snap, GangKey("default", "j0"), now=T0, config=Config())[0] == (
        "gang default/j0: min 7 of 7, Strict, timeout 600s; 7 members, 4 bound, 3 pending; "
        "4 Succeeded count toward the minimum"
    )


def test_the_rest_of_a_gang_with_members_succeeded_binds_nothing_while_one_does_not_fit() -> None:
    done = gang_pods("j0", 4, gang="j0", min_available=7, node_name="n0", phase="Succeeded")
    rest = [pod(f"j0-{i}", gang="j0", min_available=7) for i in (4, 5, 6)]
    result = schedule(snapshot([node("n0", cpu="2")], [*done, *rest]), now=T0)
    assert bind_map(result) == {}
    assert set(events(result, "FailedScheduling")) == {
        "gang default/j0 does not fit, nothing was bound; "
        "j0-6: 0/1 nodes are available: 1 Insufficient cpu."
    }


def test_a_failed_member_replaced_after_the_others_succeeded_is_placed_on_its_own() -> None:
    """A Job replaces the one member that failed after its 3 peers had succeeded: the
    minimum of 4 counts the 3, so the replacement alone completes it (it used to wait for
    4 pending members that would never exist)."""
    done = gang_pods("w", 3, pod_group="train", node_name="n0", phase="Succeeded")
    failed = replace(pod("w-3", pod_group="train"), node_name="n0", phase="Failed")
    replacement = pod("w-4", pod_group="train")
    snap = snapshot(
        [node("n0", cpu="1")],
        [*done, failed, replacement],
        podgroups=[podgroup("train", min_member=4)],
    )
    result = schedule(snap, now=T0)
    assert bind_map(result) == {"w-4": "n0"}
    assert "1 of 4 members bound, 3 completed" in _condition(_status(result)).message


def test_failed_members_count_nothing_toward_the_minimum() -> None:
    """Failed members count nothing: a Job that recreates all its pods after a failure still
    gets a whole gang or none."""
    failed = gang_pods("old", 3, pod_group="train", node_name="n0", phase="Failed")
    done = replace(pod("old-3", pod_group="train"), node_name="n0", phase="Succeeded")
    fresh = gang_pods("new", 2, pod_group="train")
    snap = snapshot(
        [node("n0", cpu="4")], [*failed, done, *fresh], podgroups=[podgroup("train", min_member=4)]
    )
    result = schedule(snap, now=T0)
    assert bind_map(result) == {}
    assert events(result, "GangWaiting")


def test_a_gang_made_anew_beside_the_members_that_succeeded_is_all_or_nothing_again() -> None:
    """The members that Succeeded fill only the places no live member takes: four new pods
    of a gang of 4 are a whole new gang, not 4 to place one by one."""
    done = gang_pods("old", 4, gang="train", min_available=4, node_name="n0", phase="Succeeded")
    fresh = gang_pods("new", 4, gang="train", min_available=4)
    result = schedule(snapshot([node("n0", cpu="2")], [*done, *fresh]), now=T0)
    assert bind_map(result) == {}
    roomy = schedule(snapshot([node("n0", cpu="4")], [*done, *fresh]), now=T0)
    assert sorted(bind_map(roomy)) == [f"new-{i}" for i in range(4)]
    assert [g.all_or_nothing for g in roomy.bindings] == [True]


def test_members_that_succeeded_do_not_let_a_gang_without_its_podgroup_bind() -> None:
    """A gang whose PodGroup does not exist waits for it, whatever its members did (review:
    counted completions made such a gang satisfied, and placed its pods one by one)."""
    done = replace(pod("w-0", pod_group="train"), node_name="n0", phase="Succeeded")
    rest = [pod(f"w-{i}", pod_group="train") for i in (1, 2, 3)]
    result = schedule(snapshot([node("n0", cpu="4")], [done, *rest]), now=T0)
    assert bind_map(result) == {}
    assert events(result, "PodGroupNotFound")


def test_a_gang_waiting_for_members_counts_those_that_succeeded() -> None:
    done = gang_pods("j0", 4, gang="j0", min_available=7, node_name="n0", phase="Succeeded")
    rest = [pod(f"j0-{i}", gang="j0", min_available=7) for i in (4, 5)]
    result = schedule(snapshot([node("n0", cpu="3")], [*done, *rest]), now=T0)
    assert bind_map(result) == {}
    assert result.memory[GangKey("default", "j0")].condition[2] == (
        "gang default/j0 has 6 of 7 members; waiting for 1 more"
    )


def test_members_that_succeeded_do_not_let_an_invalid_gang_bind() -> None:
    """Enough members Succeeded to satisfy the minimum, yet the gang's spec is invalid: it
    says so and binds nothing, as any other invalid gang."""
    spec = {"gang": "j0", "min_available": 2, "total": 4, "mode": "Sloppy"}
    done = gang_pods("j0", 3, node_name="n0", phase="Succeeded", **spec)
    rest = [pod("j0-3", **spec)]
    result = schedule(snapshot([node("n0", cpu="4")], [*done, *rest]), now=T0)
    assert bind_map(result) == {}
    assert "Sloppy" in events(result, "InvalidGangSpec")[0]
