"""A gang whose pods' claims wait for their first consumer is placed whole with a volume for
every claim on its pod's node: an existing volume there (a local PV), or one to be made
there; each volume goes to one claim; a gang that cannot have them all is placed nowhere
and says why in kube-scheduler's words. The pass decides; what it writes is in each
GroupBinding's ``volumes``."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.pods import GangKey, NodeSelectorTerm, Requirement
from scheduler.model.snapshot import GangState
from scheduler.model.volumes import (
    NO_PROVISIONER,
    WAIT_FOR_FIRST_CONSUMER,
    Claim,
    ClaimRef,
    CsiNode,
    StorageClass,
    Volume,
)
from tests.unit.builders import T0, group, node, pod, snapshot, tree_topology

HOST = "kubernetes.io/hostname"
BINDS = Config(bind_volumes=True)
LOCAL = StorageClass("local", WAIT_FOR_FIRST_CONSUMER, NO_PROVISIONER)
MADE = StorageClass("made", WAIT_FOR_FIRST_CONSUMER, "example.com/provisioner")


def _nodes(count: int) -> list:
    return [node(f"n{i}", cpu="4", labels={HOST: f"n{i}"}) for i in range(count)]


def _gang(count: int, *, storage_class: str, cpu: str = "1"):
    pods = [
        pod(f"w-{i}", gang="w", min_available=count, cpu=cpu,
            spec={"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": f"d-{i}"}}]})
        for i in range(count)
    ]  # fmt: skip
    claims = {
        ("default", f"d-{i}"): Claim(
            "default", f"d-{i}", storage_class=storage_class, uid=f"c{i}", requested=2**30,
            access_modes=frozenset({"ReadWriteOnce"}),
        )
        for i in range(count)
    }  # fmt: skip
    return pods, claims


def _local_volume(name: str, on: str, size: int = 2**30) -> Volume:
    return Volume(
        name, capacity=size, storage_class="local", access_modes=frozenset({"ReadWriteOnce"}),
        node_affinity=(NodeSelectorTerm((Requirement(HOST, "In", (on,)),)),),
    )  # fmt: skip


def _snap(pods: list, claims: dict, volumes: list[Volume], nodes: int = 3):
    return replace(
        snapshot(_nodes(nodes), pods),
        claims=claims,
        volumes={v.name: v for v in volumes},
        storage_classes={"local": LOCAL, "made": MADE},
    )


def _placed(result) -> dict[str, str]:
    return {b.pod.name: b.node for g in result.bindings for b in g.bindings}


def _written(result) -> dict[str, tuple[str, str]]:
    return {w.name: (w.volume, w.node) for g in result.bindings for w in g.volumes}


def test_a_gang_with_local_volumes_binds_each_pod_where_its_volume_is() -> None:
    pods, claims = _gang(3, storage_class="local")
    volumes = [_local_volume(f"pv-{n}", n) for n in ("n2", "n0", "n1")]
    result = schedule(_snap(pods, claims, volumes), now=T0, config=BINDS)
    placed, written = _placed(result), _written(result)
    assert len(placed) == 3
    for i in range(3):
        volume, made_on = written[f"d-{i}"]
        assert made_on == ""
        assert volume == f"pv-{placed[f'w-{i}']}", "each claim takes the volume on its node"
    assert len({v for v, _ in written.values()}) == 3, "no volume for two claims"


def test_pods_packed_on_one_node_take_its_volumes_one_each() -> None:
    pods, claims = _gang(2, storage_class="local")
    volumes = [_local_volume("pv-a", "n0"), _local_volume("pv-b", "n0")]
    result = schedule(_snap(pods, claims, volumes, nodes=1), now=T0, config=BINDS)
    assert _placed(result) == {"w-0": "n0", "w-1": "n0"}
    assert sorted(v for v, _ in _written(result).values()) == ["pv-a", "pv-b"]


def test_a_gang_with_one_volume_too_few_is_placed_nowhere_and_says_why() -> None:
    pods, claims = _gang(3, storage_class="local")
    volumes = [_local_volume("pv-n0", "n0"), _local_volume("pv-n1", "n1")]
    result = schedule(_snap(pods, claims, volumes), now=T0, config=BINDS)
    assert _placed(result) == {}
    failed = {e.message for e in result.events if e.reason == "FailedScheduling"}
    assert failed == {
        "gang default/w does not fit, nothing was bound; w-2: 0/3 nodes are available: "
        "3 node(s) didn't find available persistent volumes to bind."
    }


def test_a_gang_whose_volumes_are_made_has_them_made_on_its_pods_nodes() -> None:
    pods, claims = _gang(3, storage_class="made", cpu="3")  # one a node
    result = schedule(_snap(pods, claims, []), now=T0, config=BINDS)
    placed, written = _placed(result), _written(result)
    assert sorted(placed.values()) == ["n0", "n1", "n2"]
    assert written == {f"d-{i}": ("", placed[f"w-{i}"]) for i in range(3)}


def test_a_claim_asked_for_on_one_node_keeps_its_pod_there() -> None:
    pods, claims = _gang(1, storage_class="made")
    claims = {k: replace(c, selected_node="n2") for k, c in claims.items()}
    result = schedule(_snap(pods, claims, []), now=T0, config=BINDS)
    assert _placed(result) == {"w-0": "n2"}


def test_a_volume_made_for_its_claim_is_bound_to_it_as_it_stands() -> None:
    """Its provisioner made it for the claim (its claimRef names it) before the PV
    controller bound them: the write only waits for the binding, and a group that fails
    must not take the volume from its claim."""
    pods, claims = _gang(1, storage_class="made")
    made = replace(
        _local_volume("pvc-c0", "n0"),
        storage_class="made",
        claim=ClaimRef("default", "d-0", "c0"),
        phase="Bound",
    )
    result = schedule(_snap(pods, claims, [made], nodes=1), now=T0, config=BINDS)
    assert _placed(result) == {"w-0": "n0"}
    [write] = [w for g in result.bindings for w in g.volumes]
    assert (write.volume, write.node, write.prebound) == ("pvc-c0", "", True)


def test_a_claim_whose_volume_was_made_on_a_full_node_is_not_asked_for_elsewhere() -> None:
    """Chaos seed 11003: a provisioner slower than the group's wait made the volume after
    the choice was taken back. The PV controller binds the claim to it whatever node is
    asked next, so asking for another volume elsewhere only fails the group at its wait
    ("made for ... is out of reach"), pass after pass: the pod waits for room there."""
    pods, claims = _gang(1, storage_class="made", cpu="3")
    made = replace(
        _local_volume("pvc-c0", "n0"), storage_class="made",
        claim=ClaimRef("default", "d-0", "c0"), phase="Bound",
    )  # fmt: skip
    full = pod("other", cpu="3", node_name="n0")
    result = schedule(_snap([*pods, full], claims, [made]), now=T0, config=BINDS)
    assert _placed(result) == {}
    assert _written(result) == {}
    failed = [e.message for e in result.events if e.reason == "FailedScheduling"]
    assert any("didn't match PersistentVolume's node affinity" in m for m in failed), failed


def test_a_volume_chosen_from_the_available_ones_is_ours_to_take_back() -> None:
    pods, claims = _gang(1, storage_class="local")
    result = schedule(_snap(pods, claims, [_local_volume("pv-n1", "n1")]), now=T0, config=BINDS)
    [write] = [w for g in result.bindings for w in g.volumes]
    assert (write.volume, write.prebound) == ("pv-n1", False)


def _one_claim_bound_on_n0(**kw: object):
    """A gang of two of 3 cpus whose first member's claim is bound to a volume made on n0;
    the second's waits for its first consumer: (pods, claims, the volume)."""
    pods = [
        pod(f"w-{i}", gang="w", min_available=2, cpu="3",
            spec={"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": f"d-{i}"}}]},
            **kw)  # type: ignore[arg-type]
        for i in range(2)
    ]  # fmt: skip
    claims = {
        ("default", "d-0"): Claim(
            "default", "d-0", storage_class="made", uid="c0", requested=2**30,
            access_modes=frozenset({"ReadWriteOnce"}), volume="pvc-c0", bind_completed=True,
        ),
        ("default", "d-1"): Claim(
            "default", "d-1", storage_class="made", uid="c1", requested=2**30,
            access_modes=frozenset({"ReadWriteOnce"}),
        ),
    }  # fmt: skip
    made = replace(
        _local_volume("pvc-c0", "n0"), storage_class="made",
        claim=ClaimRef("default", "d-0", "c0"), phase="Bound",
    )  # fmt: skip
    return pods, claims, made


def test_a_nonstrict_hold_is_let_go_once_its_claim_is_bound_to_a_volume_elsewhere() -> None:
    """Chaos seed 11003: a member held on one node while its claim waited; the claim was
    then bound to a volume made on another node (a provisioner slower than the group's
    wait). The hold, bound as it stood once the gang fitted, put the pod where its volume
    could not be reached."""
    pods, claims, made = _one_claim_bound_on_n0(mode="NonStrict")
    memory = {GangKey("default", "w"): GangState(reservations={pods[0].ref: "n1"})}
    snap = replace(_snap(pods, claims, [made], nodes=3), memory=memory)
    result = schedule(snap, now=T0, config=BINDS)
    placed = _placed(result)
    assert placed.get("w-0") in (None, "n0"), "never where its volume cannot be reached"
    assert placed == {"w-0": "n0", "w-1": placed["w-1"]}
    released = [e.message for e in result.events if e.reason == "HoldReleased"]
    assert any("no longer suit them" in m for m in released), released


def test_a_nominated_member_is_not_bound_where_its_claim_since_cannot_reach() -> None:
    """Chaos seed 11003 (I13): a preemptor's members were nominated while their claims
    waited for their first consumer; one claim was then bound to a volume made on another
    node (its provisioner slower than the group's wait). The room its victims freed was
    held as it stood and bound with the gang, where the volume could not be reached."""
    pods, claims, made = _one_claim_bound_on_n0(priority=100)
    state = GangState(
        first_attempt=T0 - 5, nominated={pods[0].ref: "n1", pods[1].ref: "n2"},
        nominated_at=T0 - 2,
    )  # fmt: skip
    snap = replace(_snap(pods, claims, [made]), memory={GangKey("default", "w"): state})
    result = schedule(snap, now=T0, config=BINDS)
    assert _placed(result) == {"w-0": "n0", "w-1": "n2"}, "w-0 where its volume is"
    released = [e.message for e in result.events if e.reason == "HoldReleased"]
    assert any("no longer suit" in m for m in released), released
    assert {n.pod.name: n.node for n in result.nominations} == {"w-0": ""}, "cleared"
    # A volume the cache has not shown yet (its watch behind the claims'): not let go.
    lagging = replace(snap, volumes={})
    result = schedule(lagging, now=T0, config=BINDS)
    assert _placed(result) == {}
    assert not [e for e in result.events if e.reason == "HoldReleased"]
    assert not result.nominations


def test_without_volume_binding_such_pods_wait_and_say_so() -> None:
    pods, claims = _gang(1, storage_class="made")
    result = schedule(_snap(pods, claims, []), now=T0, config=Config(bind_volumes=False))
    assert _placed(result) == {}
    failed = [e.message for e in result.events if e.reason == "FailedScheduling"]
    assert any("--no-bind-volumes" in m for m in failed), failed


# -- review of e88abb9..137f7b3 -----------------------------------------------------------


def test_a_topology_placed_gang_takes_each_local_volume_once() -> None:
    """The arranger took room only for pods without devices: both members were packed on
    the node of the first volume, and the turn raised (an internal error, nothing placed)."""
    pods = [
        pod(f"g-{i}", labels={names.SAKKARA_GROUP_NAME: "g"}, cpu="1",
            spec={"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": f"d-{i}"}}]})
        for i in range(2)
    ]  # fmt: skip
    claims = {("default", f"d-{i}"): Claim("default", f"d-{i}", storage_class="local", uid=f"c{i}")
              for i in range(2)}  # fmt: skip
    snap = replace(
        snapshot(
            _nodes(2),
            pods,
            topology=tree_topology({"rack": {"n0": {}, "n1": {}}}, ("rack", "node")),
            groups=[group("g", size=2, constraints='{"rack": {"type": "pack"}}')],
        ),
        claims=claims,
        volumes={"pv-a": _local_volume("pv-a", "n0"), "pv-b": _local_volume("pv-b", "n1")},
        storage_classes={"local": LOCAL},
    )
    result = schedule(snap, now=T0, config=BINDS)
    assert result.errors == ()
    assert sorted(_placed(result).values()) == ["n0", "n1"]
    assert sorted(v for v, _ in _written(result).values()) == ["pv-a", "pv-b"]


def test_a_gang_stopped_only_by_an_attach_limit_preempts_the_pod_holding_it() -> None:
    """Victims still counted against the node's CSI attach limit in the what-if: such a
    gang could never preempt."""
    ebs = StorageClass("ebs", WAIT_FOR_FIRST_CONSUMER, "ebs.csi.aws.com")
    low = replace(
        pod("low", priority=1, cpu="1", spec={"volumes": [
            {"name": "d", "persistentVolumeClaim": {"claimName": "old"}}]}),
        node_name="n0", phase="Running",
    )  # fmt: skip
    mounted = {"name": "d", "persistentVolumeClaim": {"claimName": "new"}}
    high = pod("high", priority=100, cpu="1", created=T0, spec={"volumes": [mounted]})
    claims = {
        ("default", "old"): Claim("default", "old", volume="pv-old", bind_completed=True),
        ("default", "new"): Claim("default", "new", storage_class="ebs", uid="cn"),
    }
    snap = replace(
        snapshot(_nodes(1), [low, high]),
        claims=claims,
        volumes={"pv-old": Volume("pv-old", csi_driver="ebs.csi.aws.com", volume_handle="h")},
        storage_classes={"ebs": ebs},
        csi_nodes={"n0": CsiNode("n0", {"ebs.csi.aws.com": 1})},
    )
    result = schedule(snap, now=T0, config=BINDS)
    assert [e.pod.name for e in result.evictions] == ["low"]


def test_members_sharing_a_claim_share_its_volume_and_it_is_written_once() -> None:
    shared = {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "shared"}}]}
    pods = [pod(f"w-{i}", gang="w", min_available=2, cpu="1", spec=shared) for i in range(2)]
    claims = {("default", "shared"): Claim("default", "shared", storage_class="local", uid="s")}
    snap = _snap(pods, claims, [_local_volume("pv-n1", "n1")])
    result = schedule(snap, now=T0, config=BINDS)
    assert _placed(result) == {"w-0": "n1", "w-1": "n1"}, "both where its one volume is"
    assert [(w.name, w.volume) for g in result.bindings for w in g.volumes] == [("shared", "pv-n1")]


def test_a_member_pinned_by_its_volume_is_placed_before_the_members_that_may_go_anywhere() -> None:
    """Chaos seeds 11091 and 11108 (I4): a member's volume was made (late) on one node; its
    gang's other members, placed first, packed that node full, and the gang did not fit
    although it could. The most constrained member goes first."""
    free = [pod(f"w-{i}", gang="w", min_available=3, cpu="2") for i in range(2)]
    pinned = pod(
        "w-2",
        gang="w",
        min_available=3,
        cpu="2",
        spec={"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "d-2"}}]},
    )
    claims = {
        ("default", "d-2"): Claim(
            "default",
            "d-2",
            storage_class="made",
            uid="c2",
            requested=2**30,
            access_modes=frozenset({"ReadWriteOnce"}),
            volume="pvc-c2",
            bind_completed=True,
        )
    }
    made = replace(
        _local_volume("pvc-c2", "n0"), storage_class="made",
        claim=ClaimRef("default", "d-2", "c2"), phase="Bound",
    )  # fmt: skip
    snap = _snap([*free, pinned], claims, [made], nodes=2)
    placed = _placed(schedule(snap, now=T0, config=BINDS))
    assert sorted(placed) == ["w-0", "w-1", "w-2"], "the gang fits: w-2 and one on n0"
    assert placed["w-2"] == "n0", "where its volume is"


def test_a_running_gangs_member_pinned_by_its_volume_goes_before_the_free_ones() -> None:
    """Chaos seed 11595 (I4): the rival bound 3 of a gang of 24, so the 21 it lacked were
    placed as a running gang's, one by one in name order; members free to go anywhere
    packed full the node two others' volumes were made on, and the 21 never fitted
    together. A running gang's members go pinned first too."""
    nodes = [
        node("n0", cpu="3", labels={HOST: "n0"}),  # fuller: first in packing order
        node("n1", cpu="4", labels={HOST: "n1"}),
        node("rival", cpu="1", labels={HOST: "rival"}),
    ]
    filler = pod("filler", cpu="1", node_name="n0", phase="Running")
    started = pod("w-0", gang="w", min_available=4, cpu="1", node_name="rival", phase="Running")
    free = [pod(f"w-{i}", gang="w", min_available=4, cpu="1") for i in (1, 2)]
    volumes = [{"name": "d", "persistentVolumeClaim": {"claimName": "d-3"}}]
    pinned = pod("w-3", gang="w", min_available=4, cpu="1", spec={"volumes": volumes})
    claims = {
        ("default", "d-3"): Claim(
            "default", "d-3", storage_class="made", uid="c3", requested=2**30,
            access_modes=frozenset({"ReadWriteOnce"}), volume="pvc-c3", bind_completed=True,
        )
    }  # fmt: skip
    made = replace(
        _local_volume("pvc-c3", "n0"),
        storage_class="made",
        claim=ClaimRef("default", "d-3", "c3"),
        phase="Bound",
    )
    snap = replace(
        snapshot(nodes, [filler, started, *free, pinned]),
        claims=claims,
        volumes={made.name: made},
        storage_classes={"local": LOCAL, "made": MADE},
    )
    result = schedule(snap, now=T0, config=BINDS)
    placed = _placed(result)
    assert sorted(placed) == ["w-1", "w-2", "w-3"], "room: w-3 and one more on n0, one on n1"
    assert placed["w-3"] == "n0"


def test_a_replicas_member_pinned_by_its_volume_goes_before_the_free_one() -> None:
    """Gangs with a subGroupPolicy place each replica member by member too: a free member
    first took the one place left on the node the other's volume was made on, and the
    replica never fitted whole."""
    from tests.unit.test_subgroups import PARTITION, podgroup  # noqa: PLC0415

    nodes = [
        node("n0", cpu="2", labels={HOST: "n0"}),  # fuller: first in packing order
        node("n1", cpu="4", labels={HOST: "n1"}),
    ]
    filler = pod("filler", cpu="1", node_name="n0", phase="Running")
    volumes = [{"name": "d", "persistentVolumeClaim": {"claimName": "d-1"}}]
    members = [
        pod(f"dp-0-{i}", cpu="1", annotations={names.VOLCANO_GROUP_NAME: "dp"},
            labels={PARTITION: "0"}, spec={"volumes": volumes} if i else None)
        for i in range(2)
    ]  # fmt: skip
    claims = {
        ("default", "d-1"): Claim(
            "default", "d-1", storage_class="made", uid="c1", requested=2**30,
            access_modes=frozenset({"ReadWriteOnce"}), volume="pvc-c1", bind_completed=True,
        )
    }  # fmt: skip
    made = replace(
        _local_volume("pvc-c1", "n0"), storage_class="made",
        claim=ClaimRef("default", "d-1", "c1"), phase="Bound",
    )  # fmt: skip
    snap = replace(
        snapshot(nodes, [filler, *members],
                 podgroups=[podgroup("dp", min_member=2, size=2, min_subgroups=1)]),
        claims=claims, volumes={made.name: made}, storage_classes={"local": LOCAL, "made": MADE},
    )  # fmt: skip
    assert _placed(schedule(snap, now=T0, config=BINDS)) == {"dp-0-0": "n1", "dp-0-1": "n0"}
