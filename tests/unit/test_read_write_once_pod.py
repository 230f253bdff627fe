"""A ReadWriteOncePod claim is used by one pod in the whole cluster at a time (kube-scheduler's
VolumeRestrictions): a pod naming one another scheduled pod uses fits on no node, a gang two
of whose members name one binds nothing, two pods naming one get it one at a time, and a
preemption may free it by evicting its user."""

from __future__ import annotations

from dataclasses import replace

from scheduler.cache import kinds
from scheduler.core.scheduling import schedule
from scheduler.core.volume_restrictions import CONFLICT
from scheduler.model.volumes import Claim, ClaimRef, Volume
from tests.unit.builders import T0, node, pod, snapshot
from tests.unit.test_allocation import bind_map
from tests.unit.test_queue import Loop

RWOP = frozenset({"ReadWriteOncePod"})


def _user(name: str, claim: str = "data", **kw):
    volumes = [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]
    return pod(name, spec={"volumes": volumes}, **kw)


def _bound(name: str = "data", modes: frozenset[str] = RWOP) -> tuple[Claim, Volume]:
    claim = Claim(
        "default", name, volume=f"pv-{name}", uid=f"c-{name}", access_modes=modes,
        bind_completed=True, requested=2**30,
    )  # fmt: skip
    volume = Volume(
        f"pv-{name}", capacity=2**30, access_modes=modes, phase="Bound",
        claim=ClaimRef("default", name, f"c-{name}"),
    )  # fmt: skip
    return claim, volume


def _snap(pods: list, *named: tuple[Claim, Volume], nodes: int = 2):
    return replace(
        snapshot([node(f"n{i}", cpu="4") for i in range(nodes)], pods),
        claims={c.key: c for c, _ in named},
        volumes={v.name: v for _, v in named},
    )


def _failed(result) -> list[str]:
    return [e.message for e in result.events if e.reason == "FailedScheduling"]


def test_a_pod_whose_claim_another_pod_uses_fits_on_no_node_and_says_why() -> None:
    running = _user("running", node_name="n0", phase="Running")
    result = schedule(_snap([running, _user("new")], _bound()), now=T0)
    assert bind_map(result) == {}
    [said] = _failed(result)
    assert said.endswith(f"new: 0/2 nodes are available: 2 {CONFLICT}."), said


def test_a_gang_two_of_whose_members_name_one_such_claim_binds_nothing() -> None:
    members = [_user(f"w-{i}", gang="w", min_available=2) for i in range(2)]
    result = schedule(_snap(members, _bound()), now=T0)
    assert bind_map(result) == {}
    assert any(CONFLICT in m for m in _failed(result)), _failed(result)


def test_two_pods_naming_one_such_claim_get_it_one_at_a_time() -> None:
    older, younger = _user("a", created=T0 - 20), _user("b", created=T0 - 10)
    result = schedule(_snap([younger, older], _bound()), now=T0)
    assert sorted(bind_map(result)) == ["a"]


def test_a_claim_of_another_access_mode_may_be_used_by_many() -> None:
    shared = _bound(modes=frozenset({"ReadWriteMany"}))
    running = _user("running", node_name="n0", phase="Running")
    result = schedule(_snap([running, _user("a"), _user("b")], shared), now=T0)
    assert sorted(bind_map(result)) == ["a", "b"]


def test_a_claim_whose_user_finished_is_free_again() -> None:
    done = _user("done", node_name="n0", phase="Succeeded")
    result = schedule(_snap([done, _user("new")], _bound()), now=T0)
    assert sorted(bind_map(result)) == ["new"]


def test_a_gang_of_higher_priority_evicts_the_pod_that_uses_its_claim_and_only_it() -> None:
    user = _user("low-user", node_name="n0", phase="Running", priority=1, cpu="1")
    bystander = pod("low-other", node_name="n1", phase="Running", priority=1, cpu="1")
    high = [_user("high-0", gang="high", min_available=1, priority=100)]
    result = schedule(_snap([user, bystander, *high], _bound()), now=T0)
    assert sorted(e.pod.name for e in result.evictions) == ["low-user"]


def test_a_gang_waiting_for_its_claim_is_tried_again_when_its_user_goes_from_another_node() -> None:
    """The pod fits only on n1 (a selector) and the claim's user runs on n0: its going
    changes nothing on n1, yet it is what the waiting pod needs."""
    user = _user("user", node_name="n0", phase="Running")
    waiting = _user("new", gang="new", min_available=1, node_selector={"disk": "fast"})
    loop = Loop(
        user, waiting, nodes=[node("n0", cpu="4"), node("n1", cpu="4", labels={"disk": "fast"})]
    )
    claim, volume = _bound()
    loop.cache.upsert(kinds.PERSISTENT_VOLUME_CLAIMS, claim)
    loop.cache.upsert(kinds.PERSISTENT_VOLUMES, volume)
    first = loop.run(T0)
    assert first.attempts
    assert not bind_map(first)
    assert not loop.run(T0 + 20).attempts  # parked: nothing it needs changed
    loop.cache.upsert_pod(replace(user, phase="Succeeded"))
    assert bind_map(loop.run(T0 + 21)) == {"new": "n1"}


def test_a_gang_waiting_for_its_claim_is_woken_when_its_user_leaves_a_node_that_stays_full() -> (
    None
):
    user = _user("user", node_name="n0", phase="Running", cpu="1")
    filler = pod("filler", scheduler="x", node_name="n0", phase="Running", cpu="3")
    waiting = _user("new", gang="new", min_available=1, cpu="2", node_selector={"disk": "fast"})
    nodes = [node("n0", cpu="4"), node("n1", cpu="4", labels={"disk": "fast"})]
    loop = Loop(user, filler, waiting, nodes=nodes)
    claim, volume = _bound()
    loop.cache.upsert(kinds.PERSISTENT_VOLUME_CLAIMS, claim)
    loop.cache.upsert(kinds.PERSISTENT_VOLUMES, volume)
    assert not bind_map(loop.run(T0))
    assert not loop.run(T0 + 20).attempts
    loop.cache.upsert_pod(replace(user, phase="Succeeded"))
    assert bind_map(loop.run(T0 + 21)) == {"new": "n1"}


def test_a_gang_preemption_cannot_help_does_not_hide_one_whose_claim_a_victim_frees() -> None:
    """Two gangs of one shape: the first's claim is used by a pod of higher priority (no
    victim), the second's by one of lower priority."""
    x_user = _user("x-user", claim="x", node_name="n0", phase="Running", priority=1000, cpu="1")
    y_user = _user("y-user", claim="y", node_name="n1", phase="Running", priority=1, cpu="1")
    a = _user("a-0", claim="x", gang="a", min_available=1, priority=100, created=T0 - 20)
    b = _user("b-0", claim="y", gang="b", min_available=1, priority=100, created=T0 - 10)
    result = schedule(_snap([x_user, y_user, a, b], _bound("x"), _bound("y")), now=T0)
    assert sorted(e.pod.name for e in result.evictions) == ["y-user"]
