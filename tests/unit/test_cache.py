"""The cluster cache: assume/forget, what counts as a change, and what it keeps."""

from __future__ import annotations

from dataclasses import replace

from scheduler.cache.cluster import ClusterCache
from scheduler.codecs.owners import owner_from_dict
from scheduler.model.gangs import JobProgress
from scheduler.model.owners import OwnerKey, OwnerKind
from scheduler.model.pods import GangKey
from scheduler.model.snapshot import GangState, Staleness
from tests.unit.builders import SCHEDULER, node, pod, podgroup


def cache_with(*pods, nodes=("n0",)) -> ClusterCache:
    cache = ClusterCache(scheduler_name=SCHEDULER)
    for name in nodes:
        cache.upsert_node(node(name))
    for p in pods:
        cache.upsert_pod(p)
    return cache


def test_an_assumed_pod_counts_as_bound_until_forgotten() -> None:
    p = pod("p")
    cache = cache_with(p)
    cache.assume(p.ref, "n0")
    assert [x.node_name for x in cache.snapshot().pods] == ["n0"]
    cache.forget(p.ref)
    assert [x.node_name for x in cache.snapshot().pods] == [""]


def test_a_stale_unbound_event_does_not_undo_an_assumption() -> None:
    p = pod("p")
    cache = cache_with(p)
    cache.assume(p.ref, "n0")
    cache.upsert_pod(replace(p, phase="Pending"))  # e.g. a label change before the bind lands
    assert [x.node_name for x in cache.snapshot().pods] == ["n0"]


def test_the_bound_event_ends_the_assumption_so_forget_is_then_a_no_op() -> None:
    p = pod("p")
    cache = cache_with(p)
    cache.assume(p.ref, "n0")
    cache.upsert_pod(replace(p, node_name="n0"))
    cache.forget(p.ref)
    assert [x.node_name for x in cache.snapshot().pods] == ["n0"]


def test_pending_pods_of_other_schedulers_are_not_kept_but_their_bound_ones_are() -> None:
    theirs_pending = pod("a", scheduler="default-scheduler")
    theirs_bound = pod("b", scheduler="default-scheduler", node_name="n0", phase="Running")
    cache = cache_with(theirs_pending, theirs_bound)
    snap = cache.snapshot()
    assert snap.pods == ()  # a snapshot's pods are ours; theirs count on their node
    assert [x.ref.name for x in snap.infos()["n0"].pods] == ["b"]


def test_confirmed_binds_of_pods_without_podgroup_need_no_pass() -> None:
    p = pod("p")
    cache = cache_with(p)
    cache.snapshot()  # a pass starts
    assert not cache.dirty
    cache.assume(p.ref, "n0")
    cache.upsert_pod(replace(p, node_name="n0"))
    cache.upsert_pod(replace(p, node_name="n0", phase="Running"))
    assert not cache.dirty
    cache.upsert_pod(pod("new"))
    assert cache.dirty


def confirmed(member, *, phase: str = "Pending"):
    """``member`` as the watch shows it once its bind to n0 went through."""
    return replace(
        member, node_name="n0", phase=phase, scheduled_condition=("True", "", "", "2026-11-25")
    )


def test_a_podgroup_members_confirmed_bind_is_a_recount_not_urgent_work() -> None:
    """The loop runs a pass for a recount at most once a second; anything that could place
    a pod (a new pending pod, say) is urgent again."""
    member = pod("m", pod_group="pg")
    cache = cache_with(member)
    cache.upsert_podgroup(podgroup("pg", min_member=1))
    cache.snapshot()  # a pass starts, and assumes the member
    cache.assume(member.ref, "n0")
    cache.upsert_pod(confirmed(member))
    assert (cache.dirty, cache.urgent) == (True, False)
    cache.snapshot()
    cache.upsert_pod(confirmed(member, phase="Running"))
    assert (cache.dirty, cache.urgent) == (True, False)
    cache.upsert_pod(pod("new", pod_group="pg"))
    assert cache.urgent
    cache.snapshot()
    assert (cache.dirty, cache.urgent) == (False, False)


def test_a_confirmed_bind_is_urgent_while_its_gang_has_members_waiting() -> None:
    """A gang is satisfied only by confirmed binds, and nothing of it is placed while its
    binds are in flight: the confirmation is what its third member waits for (by PodGroup or
    by annotations alone, which once woke no pass at all)."""
    for gang in ({"pod_group": "pg"}, {"gang": "g", "min_available": 2}):
        a, b, c = (pod(name, **gang) for name in "abc")
        cache = cache_with(a, b)
        cache.upsert_podgroup(podgroup("pg", min_member=2))
        cache.snapshot()
        cache.assume(a.ref, "n0")
        cache.assume(b.ref, "n0")
        cache.upsert_pod(c)  # a pass runs, and can place nothing while a and b fly
        cache.snapshot()
        cache.upsert_pod(confirmed(a))
        assert (cache.dirty, cache.urgent) == (True, True), gang


def test_a_confirmation_that_changes_nothing_else_still_ends_the_wait_of_its_gang() -> None:
    a, b = pod("a", gang="g", min_available=2), pod("b", gang="g", min_available=2)
    cache = cache_with(a, b)
    cache.snapshot()
    cache.assume(a.ref, "n0")
    cache.snapshot()
    cache.upsert_pod(replace(a, node_name="n0"))  # just as assumed
    assert (cache.dirty, cache.urgent) == (True, True)
    # Nobody of its gang waiting, a PodGroup to recount: dirty, not urgent.
    member = pod("m", pod_group="pg")
    cache = cache_with(member)
    cache.upsert_podgroup(podgroup("pg", min_member=1))
    cache.snapshot()
    cache.assume(member.ref, "n0")
    cache.upsert_pod(replace(member, node_name="n0"))
    assert (cache.dirty, cache.urgent) == (True, False)


def test_freed_capacity_needs_a_pass_only_when_something_waits() -> None:
    done = pod("done", node_name="n0", phase="Running")
    cache = cache_with(done)
    cache.snapshot()  # a pass starts
    cache.upsert_pod(replace(done, phase="Succeeded"))
    assert not cache.dirty
    waiting = pod("waiting")
    busy = pod("busy", node_name="n0", phase="Running")
    cache = cache_with(busy, waiting)
    cache.snapshot()  # a pass starts
    cache.remove_pod(busy.ref.uid)
    assert cache.dirty


def test_a_podgroup_status_alone_needs_no_pass_but_its_spec_does() -> None:
    """The status is what passes write: its echo is no work (and the gang is not looked
    at for it), but it is kept for the next pass that does look; a spec change is work."""
    bound = pod("b", pod_group="pg", node_name="n0", phase="Running")
    cache = cache_with(bound)
    cache.upsert_podgroup(podgroup("pg", min_member=1))
    cache.snapshot()  # a pass starts
    cache.remember({GangKey("default", "pg"): GangState(satisfied=True)})
    written = podgroup("pg", min_member=1, status={"phase": "Running", "running": 1})
    cache.upsert_podgroup(written)
    assert not cache.dirty
    snap = cache.snapshot()
    assert snap.pods == ()  # the gang is not active for it
    assert snap.podgroups[GangKey("default", "pg")].status.running == 1  # but it is kept
    cache.upsert_podgroup(podgroup("pg", min_member=2, status={"phase": "Running", "running": 1}))
    assert cache.dirty
    assert [p.ref.name for p in cache.snapshot().pods] == ["b"]


def test_sync_tracking_reports_what_the_watches_have_not_delivered() -> None:
    cache = cache_with(pod("p"))
    expected = {("pods", "uid-default-p"), ("nodes", "n0"), ("nodes", "n1")}
    assert cache.unseen(expected) == {("nodes", "n1")}


def test_an_assumed_pod_no_longer_waits_and_a_forgotten_one_does_again() -> None:
    waiting = pod("waiting")
    busy, other = (pod(n, node_name="n0", phase="Running") for n in ("busy", "other"))
    cache = cache_with(busy, other, waiting)
    cache.assume(waiting.ref, "n0")
    cache.snapshot()  # a pass starts
    cache.upsert_pod(replace(busy, phase="Succeeded"))
    assert not cache.dirty  # nothing waits: freed capacity needs no pass
    cache.forget(waiting.ref)
    cache.snapshot()  # a pass starts
    cache.remove_pod(other.ref.uid)
    assert cache.dirty  # the forgotten pod waits again


def test_node_info_follows_binds_finishes_and_forgets_and_changes_generation() -> None:
    a = pod("a", cpu="2")
    theirs = pod("t", scheduler="default-scheduler", node_name="n0", phase="Running", cpu="1")
    cache = cache_with(a, theirs)
    first = cache.snapshot().infos()["n0"]
    assert first.requested["cpu"] == 1000
    cache.assume(a.ref, "n0")
    assumed = cache.snapshot().infos()["n0"]
    assert assumed.requested["cpu"] == 3000
    assert assumed.generation > first.generation
    cache.upsert_pod(replace(a, node_name="n0", phase="Succeeded"))
    finished = cache.snapshot().infos()["n0"]
    assert finished.requested["cpu"] == 1000
    assert [p.ref.name for p in finished.pods] == ["t"]


def test_a_snapshot_copies_node_infos_that_did_not_change() -> None:
    cache = cache_with(pod("t", scheduler="x", node_name="n0", phase="Running"))
    cache.upsert_node(node("n1"))
    before = cache.snapshot().infos()
    cache.upsert_pod(pod("u", scheduler="x", node_name="n1", phase="Running"))
    after = cache.snapshot().infos()
    assert after["n0"] is before["n0"]
    assert after["n1"] is not before["n1"]


def test_memory_the_shell_changed_during_a_pass_survives_the_pass() -> None:
    key = GangKey("default", "g")
    cache = cache_with(pod("p"))
    cache.snapshot()  # a pass starts
    cache.update_memory(key, GangState(attempts=3))  # a rejected bind, while it runs
    cache.remember({key: GangState(attempts=1)})  # the pass ends
    assert cache.memory[key].attempts == 3


def test_an_owner_kind_served_once_and_then_refused_keeps_its_gangs_waiting() -> None:
    """Never served: its pods are placed as they come. Served, then refused (RBAC taken away,
    its CRD being deleted): its gangs wait for their owners rather than bind in parts."""
    from scheduler.model.owners import OwnerKind  # noqa: PLC0415

    cache = ClusterCache(scheduler_name=SCHEDULER)
    cache.serve("rayclusters", False)
    assert OwnerKind.RAY_CLUSTER not in cache.snapshot(whole=True).owner_kinds
    cache.serve("jobsets", True)
    cache.serve("jobsets", False)
    assert OwnerKind.JOBSET in cache.snapshot(whole=True).owner_kinds
    cache.serve("rayclusters", True)
    assert OwnerKind.RAY_CLUSTER in cache.snapshot(whole=True).owner_kinds


def test_a_stale_gang_with_nothing_pending_is_in_the_pass_that_is_due_to_evict_it() -> None:
    """#23: a running gang below its minimum has nothing pending and nothing changes when
    its grace ends: the cache still puts it in that pass, and not in earlier ones."""
    running = [
        pod(f"g-{i}", gang="g", min_available=3, node_name="n0", phase="Running") for i in range(2)
    ]
    cache = cache_with(*running)
    cache.snapshot(now=100.0)  # a pass starts: it finds the gang stale
    stale = GangState(satisfied=True, stale=Staleness(since=100.0, due=160.0))
    cache.remember({GangKey("default", "g"): stale})
    assert cache.snapshot(now=130.0).pods == ()
    assert sorted(p.ref.name for p in cache.snapshot(now=160.0).pods) == ["g-0", "g-1"]


def test_a_jobs_succeeded_count_is_work_for_the_gang_its_pods_declare() -> None:
    """A gang of a Job's pods counts its completions by the Job's status: the Job is in the
    snapshot, and its count changing wakes a pass for the gang; a Job none of our pods
    belong to is no pass's business."""
    waiting = replace(pod("train-b", gang="train", min_available=2), job="train")
    cache = cache_with(waiting)
    cache.upsert_owner(job("train", succeeded=0))
    cache.upsert_owner(job("other", succeeded=0))
    snap = cache.snapshot()  # a pass starts
    assert [key.name for key in snap.owners] == ["train"]
    cache.upsert_owner(job("other", succeeded=1))
    assert not cache.dirty
    cache.upsert_owner(job("train", succeeded=1))
    assert cache.dirty
    progress = cache.snapshot().owners[OwnerKey("default", OwnerKind.JOB, "train")].progress
    assert progress == JobProgress(succeeded=1, left=1)
    cache.remove_pod(waiting.ref.uid)
    assert not cache.snapshot().owners


def job(name: str, *, succeeded: int):
    return owner_from_dict(
        OwnerKind.JOB,
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"parallelism": 2, "completions": 2},
            "status": {"succeeded": succeeded},
        },
    )


def test_a_gang_of_two_jobs_pods_lets_go_of_both_jobs_when_it_goes() -> None:
    """Review: the owners of a gang were let go by its last member's alone, so a gang whose
    members came from two Jobs kept the other Job in every snapshot after it went."""
    a = replace(pod("a-0", gang="train", min_available=2), job="a")
    b = replace(pod("b-0", gang="train", min_available=2), job="b")
    cache = cache_with(a, b)
    cache.upsert_owner(job("a", succeeded=0))
    cache.upsert_owner(job("b", succeeded=0))
    assert sorted(key.name for key in cache.snapshot().owners) == ["a", "b"]
    cache.remove_pod(a.ref.uid)
    cache.remove_pod(b.ref.uid)
    assert not cache.snapshot().owners


def test_a_gang_with_a_member_marked_for_eviction_is_in_every_pass() -> None:
    """Nothing of it waits or changes, yet a pass must look at it when its marks are due
    (finish-evictions): a leader that stopped part-way through a victim set left it."""
    from scheduler.model.pods import Disruption  # noqa: PLC0415

    running = [
        replace(p, node_name="n0", phase="Running")
        for p in (pod("g-0", gang="g", min_available=2), pod("g-1", gang="g", min_available=2))
    ]
    mark = Disruption("PreemptionByScheduler", SCHEDULER, 90.0, whole_gang=True)
    cache = cache_with(replace(running[0], disrupted=mark), running[1])
    cache.snapshot(now=100.0)
    assert sorted(p.ref.name for p in cache.snapshot(now=130.0).pods) == ["g-0", "g-1"]
    cache.upsert_pod(running[0])  # the mark is gone (or the pod): the gang is left alone
    cache.snapshot(now=131.0)
    assert cache.snapshot(now=200.0).pods == ()
