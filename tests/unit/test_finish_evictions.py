"""What a pass chose to evict is evicted whole, even when the scheduler that chose it stopped
part-way through sending it (chaos seed 8035: a leader lost its Lease during an etcd outage
with all 25 members of a victim gang chosen; 4 were deleted, 9 marked and left running, 12
neither; no later leader finished it, and 21 ran on below the minimum of 25)."""

from __future__ import annotations

from dataclasses import replace

from scheduler.codecs.objects import pod_from_dict
from scheduler.core.actions.finish_evictions import RESEND_SECONDS
from scheduler.core.scheduling import schedule
from scheduler.model.pods import Disruption, Pod
from tests.unit.builders import SCHEDULER, T0, gang_pods, node, snapshot
from tests.unit.test_allocation import bind_map
from tests.unit.test_preemption import evicted

PREEMPTED = "PreemptionByScheduler"


def gang_on_n0(count: int, *, minimum: int) -> list[Pod]:
    members = gang_pods("g", count, gang="g", min_available=minimum, cpu="2")
    return [replace(p, node_name="n0", phase="Running") for p in members]


def marked(
    p: Pod, *, ago: float, by: str = SCHEDULER, reason: str = PREEMPTED, whole: bool = True
) -> Pod:
    """``p`` marked ``ago`` seconds ago; ``whole``: its gang was chosen whole."""
    return replace(p, disrupted=Disruption(reason, by, T0 - ago, whole_gang=whole))


def test_a_victim_gang_marked_in_part_by_a_leader_that_stopped_is_evicted_whole() -> None:
    members = gang_on_n0(4, minimum=4)
    pods = [marked(members[0], ago=60), marked(members[1], ago=60), *members[2:]]
    result = schedule(snapshot([node("n0")], pods), now=T0)
    assert evicted(result) == ["g-0", "g-1", "g-2", "g-3"], "the marked again, the rest too"
    assert all("finish the eviction of gang default/g" in e.message for e in result.evictions)


def test_nothing_is_finished_while_a_mark_is_fresh_its_sender_may_still_be_sending() -> None:
    """A leader marks and deletes a victim set over several round trips: a pass between
    them sees some members marked and the rest not, and must leave them to it."""
    members = gang_on_n0(4, minimum=4)
    pods = [marked(members[0], ago=2), *members[1:]]
    assert schedule(snapshot([node("n0")], pods), now=T0).evictions == ()
    later = schedule(snapshot([node("n0")], pods), now=T0 + RESEND_SECONDS)
    assert evicted(later) == ["g-0", "g-1", "g-2", "g-3"], "no sender finished it: whole"


def test_members_above_the_minimum_marked_long_ago_are_sent_again_and_the_rest_kept() -> None:
    members = gang_on_n0(4, minimum=2)
    pods = [
        marked(members[0], ago=60, whole=False),
        marked(members[1], ago=2, whole=False),
        *members[2:],
    ]
    assert schedule(snapshot([node("n0")], pods), now=T0).evictions == (), "g-1 is fresh"
    later = schedule(snapshot([node("n0")], pods), now=T0 + RESEND_SECONDS)
    assert evicted(later) == ["g-0", "g-1"], "two left unmarked: the minimum runs on"


def test_a_gang_at_its_minimum_keeps_its_members_though_some_carry_old_marks() -> None:
    """Its two members above the minimum of 4 were marked alone (a sender stopped), and two
    others went since: 4 run, the minimum; none is taken, nor its gang whole."""
    members = gang_on_n0(4, minimum=4)
    pods = [
        marked(members[0], ago=60, whole=False),
        marked(members[1], ago=60, whole=False),
        *members[2:],
    ]
    assert schedule(snapshot([node("n0")], pods), now=T0).evictions == ()


def test_a_fresh_mark_asks_for_a_pass_when_it_is_due() -> None:
    members = gang_on_n0(2, minimum=2)
    result = schedule(snapshot([node("n0")], [marked(members[0], ago=10), members[1]]), now=T0)
    assert result.wake_at == T0 - 10 + RESEND_SECONDS


def test_marks_another_scheduler_wrote_are_left_to_it() -> None:
    members = gang_on_n0(4, minimum=4)
    pods = [marked(members[0], ago=60, by="default-scheduler"), *members[1:]]
    assert schedule(snapshot([node("n0")], pods), now=T0).evictions == ()


def test_a_stale_gangs_members_are_finished_as_stale() -> None:
    members = gang_on_n0(3, minimum=4)
    pods = [marked(members[0], ago=60, reason="StaleGang"), *members[1:]]
    result = schedule(snapshot([node("n0")], pods), now=T0)
    assert evicted(result) == ["g-0", "g-1", "g-2"]
    assert all(e.stale for e in result.evictions)


def test_the_mark_is_read_from_the_pods_disruption_target_condition() -> None:
    def with_condition(**condition: str) -> Pod:
        return pod_from_dict(
            {
                "metadata": {"name": "p", "namespace": "default", "uid": "u"},
                "spec": {"schedulerName": SCHEDULER, "nodeName": "n0"},
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "DisruptionTarget", **condition}],
                },
            }
        )

    ours = with_condition(
        status="True", reason="PreemptionByScheduler",
        message=f"{SCHEDULER}: [whole gang] Preempted by gang default/hi (priority 100)",
        lastTransitionTime="2026-01-01T00:00:00Z",
    )  # fmt: skip
    assert ours.disrupted is not None
    assert (ours.disrupted.reason, ours.disrupted.by) == ("PreemptionByScheduler", SCHEDULER)
    assert ours.disrupted.since > 0
    assert ours.disrupted.whole_gang
    evicted_by_api = with_condition(status="True", reason="EvictionByEvictionAPI", message="x")
    assert evicted_by_api.disrupted is None, "the API server's eviction deletes at once"
    cleared = with_condition(status="False", reason="PreemptionByScheduler", message="x")
    assert cleared.disrupted is None


def test_a_gang_whose_running_members_are_all_marked_starts_anew_whole() -> None:
    """Chaos seed 8514: a preemption marked all 4 members of a StatefulSet's gang (min 3);
    the first deleted was made again at once, and the pass bound it alone, the gang counting
    as running on its three marked members still there; its peers bound 2 s later."""
    members = gang_on_n0(4, minimum=3)
    going = [marked(p, ago=1) for p in members[1:]]
    again = gang_pods("g", 1, gang="g", min_available=3, cpu="2")[0]  # g-0 made again
    result = schedule(snapshot([node("n0"), node("n1")], [*going, again]), now=T0)
    assert bind_map(result) == {}, "one member of a gang of 3 is not bound alone"
    # Marked alone (members above the minimum), the gang runs on: the new one joins it.
    extra = [marked(members[1], ago=1, whole=False), *members[2:]]
    kept = schedule(snapshot([node("n0"), node("n1")], [*extra, again]), now=T0)
    assert list(bind_map(kept)) == ["g-0"]


def test_marked_victims_whose_eviction_is_in_flight_are_not_sent_again() -> None:
    """Soak d233f5c: deletes queued behind binds left ~400 marked pods alive past
    RESEND_SECONDS, and every pass sent them again (14,880 evictions counted for ~724
    deleted). A victim this replica is still evicting (``leaving``) is not finished anew."""
    members = gang_on_n0(4, minimum=4)
    pods = [marked(p, ago=60) for p in members]
    going = frozenset(p.ref.uid for p in pods)
    result = schedule(replace(snapshot([node("n0")], pods), leaving=going), now=T0)
    assert result.evictions == ()


def test_only_the_marked_victims_not_in_flight_are_sent_again() -> None:
    """Two of four marks' deletes are in flight; the other two were never sent (a leader
    stopped): those two go, and nothing of the gang twice."""
    members = gang_on_n0(4, minimum=4)
    pods = [marked(p, ago=60) for p in members]
    going = frozenset(p.ref.uid for p in pods[:2])
    result = schedule(replace(snapshot([node("n0")], pods), leaving=going), now=T0)
    assert evicted(result) == ["g-2", "g-3"]
