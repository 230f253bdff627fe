"""A topology weighs the devices members' claims ask (#44): a node's cpu alone would hold
every member of a gang whose claims each ask all its GPUs, and a rack's cpu alone would say
nothing of how full its GPUs are. Bind maps on plain snapshots."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.pods import GangKey, Pod
from scheduler.model.snapshot import Snapshot
from tests.unit.builders import T0, group, node, pod
from tests.unit.test_allocation import bind_map
from tests.unit.test_device_preemption import _held
from tests.unit.test_dra import claim, claiming_pod, dra_snapshot, exactly, gpu_slice
from tests.unit.test_network_topology import RACKS
from tests.unit.test_network_topology import group as volcano_group
from tests.unit.test_topology_scheduling import SEED

PACKED = '{"rack": {"type": "pack"}}'


def _claimers(name: str, count: int, *, gpus: int, **kw: dict) -> tuple[list[Pod], list]:
    """``count`` pods, each with a claim of its own (from a template) asking ``gpus``."""
    pods, claims = [], []
    for i in range(count):
        member = f"{name}-{i}"
        pods.append(claiming_pod(member, f"{member}-gpus", created=T0, cpu="1", **kw))
        claims.append(claim(f"{member}-gpus", exactly(count=gpus), owner=member))
    return pods, claims


def _holding(name: str, on: str) -> tuple[Pod, dict]:
    """A running pod whose claim holds the 8 GPUs of ``on``."""
    holder = claiming_pod(name, f"{name}-gpus", template=False, node_name=on,
                          phase="Running", created=T0 - 100, cpu="1")  # fmt: skip
    return holder, claim(f"{name}-gpus", exactly(count=8), status=_held(on, name))


def _packed_group(size: int, *, held: list[str]) -> Snapshot:
    """Sakkara group g of ``size`` members, each claiming 8 GPUs, packed in a rack of the
    seed's tree (6 nodes of 8 GPUs); the GPUs of the nodes in ``held`` are held already."""
    pods, claims = _claimers("g", size, gpus=8, labels={names.SAKKARA_GROUP_NAME: "g"})
    holders = [_holding(f"h{i}", on) for i, on in enumerate(held)]
    nodes = [node(f"node-{i}") for i in range(6)]
    snap = dra_snapshot(
        nodes,
        [*pods, *(h for h, _ in holders)],
        slices=[gpu_slice(n.name) for n in nodes],
        claims=[*claims, *(c for _, c in holders)],
    )
    return replace(
        snap,
        topology=SEED,
        groups={GangKey("default", "g"): group("g", size=size, constraints=PACKED)},
    )


def test_a_packed_group_goes_to_the_rack_whose_gpus_hold_it_not_the_one_whose_cpu_does() -> None:
    """rack-0 is the fuller (two of its three nodes' GPUs are held) and its cpu would hold
    both members; its GPUs hold one. rack-1's hold both."""
    snap = _packed_group(2, held=["node-1", "node-2", "node-5"])
    placed = bind_map(schedule(snap, now=T0))
    assert sorted(placed.values()) == ["node-3", "node-4"], placed


def test_a_tier_gang_takes_the_rack_fullest_in_the_gpus_it_asks_not_in_cpu() -> None:
    """rack-0's cpu is the fullest (a 6-cpu pod on n0) but all 16 of its GPUs are free;
    rack-1 has 8 GPUs free, on n3: the gang of 2 x 4 GPUs fills rack-1 and leaves rack-0's
    whole nodes for a gang that needs them."""
    pods, claims = _claimers("dp", 2, gpus=4, annotations={names.VOLCANO_GROUP_NAME: "dp"})
    filler = pod("filler", cpu="6", node_name="n0", phase="Running", created=T0 - 100)
    holder, held = _holding("holder", "n2")
    nodes = [node(f"n{i}") for i in range(6)]
    snap = dra_snapshot(
        nodes,
        [*pods, filler, holder],
        slices=[gpu_slice(f"n{i}") for i in range(4)],
        claims=[*claims, held],
    )
    snap = replace(
        snap,
        topology=RACKS,
        podgroups={pg.key: pg for pg in [volcano_group("dp", min_member=2)]},
    )
    placed = bind_map(schedule(snap, now=T0))
    assert placed == {"dp-0": "n3", "dp-1": "n3"}, placed


def test_a_group_the_gpus_cannot_hold_is_told_how_many_members_they_hold() -> None:
    """Only node-0 and node-3 have their 8 GPUs free: room for 2 of the 3 members, though
    the cpu of every node would hold them all."""
    result = schedule(_packed_group(3, held=["node-1", "node-2", "node-4", "node-5"]), now=T0)
    assert bind_map(result) == {}
    messages = {e.message for e in result.events if e.reason == "FailedScheduling"}
    assert any("the topology has room for 2 of 3 members" in m for m in messages), messages
