"""A gang whose pods' claims wait for their first consumer is placed whole with a volume for
every claim on its pod's node: an existing volume there (a local PV), or one to be made
there; each volume goes to one claim; a gang that cannot have them all is placed nowhere
and says why in kube-scheduler's words. The pass decides; what it writes is in each
GroupBinding's ``volumes``."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.scheduling import schedule
from scheduler.model.config import Config
from scheduler.model.pods import NodeSelectorTerm, Requirement
from scheduler.model.volumes import (
    NO_PROVISIONER,
    WAIT_FOR_FIRST_CONSUMER,
    Claim,
    StorageClass,
    Volume,
)
from tests.unit.builders import T0, node, pod, snapshot

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


def test_without_volume_binding_such_pods_wait_and_say_so() -> None:
    pods, claims = _gang(1, storage_class="made")
    result = schedule(_snap(pods, claims, []), now=T0)
    assert _placed(result) == {}
    failed = [e.message for e in result.events if e.reason == "FailedScheduling"]
    assert any("does not provision volumes yet" in m for m in failed), failed
