"""What a pod spec says beyond resources and node selection (issue #11): scheduling gates,
host ports, inter-pod affinity and anti-affinity, honoured for whole gangs, as bind maps."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core.scheduling import schedule
from scheduler.model.config import Config
from scheduler.model.pods import NodeSelectorTerm, Pod, Requirement
from scheduler.model.volumes import WAIT_FOR_FIRST_CONSUMER, Claim, StorageClass, Volume
from tests.unit.builders import T0, gang_pods, node, pod, podgroup, snapshot
from tests.unit.test_allocation import bind_map, events

GATE = {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}


def test_gang_with_one_gated_member_binds_nothing_and_names_the_gated_pod() -> None:
    pods = gang_pods("train", 2, gang="train", min_available=3)
    pods.append(pod("train-2", gang="train", min_available=3, spec=GATE))
    result = schedule(snapshot([node("n0")], pods), now=T0)
    assert bind_map(result) == {}
    gated = [e for e in result.events if e.reason == "SchedulingGated"]
    assert gated, "the gang's members are told why they wait"
    assert "train-2 (kueue.x-k8s.io/admission)" in gated[0].message
    assert result.memory[pods[0].gang.key].condition[1] == "SchedulingGated"  # type: ignore[union-attr]


def test_gang_binds_at_once_when_its_gates_are_removed() -> None:
    pods = [pod(f"train-{i}", gang="train", min_available=3, spec=GATE) for i in range(3)]
    first = schedule(snapshot([node("n0")], pods), now=T0)
    assert bind_map(first) == {}
    assert events(first, "SchedulingGated"), "a fully gated gang says so too"
    ungated = [replace(p, gates=()) for p in pods]
    second = schedule(snapshot([node("n0")], ungated, memory=first.memory), now=T0 + 1)
    assert bind_map(second) == {f"train-{i}": "n0" for i in range(3)}


def test_gated_member_beyond_min_member_does_not_hold_back_the_others() -> None:
    group = podgroup("spark", min_member=2)
    pods = gang_pods("spark", 2, pod_group="spark")
    pods.append(pod("spark-2", pod_group="spark", spec=GATE))
    result = schedule(snapshot([node("n0")], pods, podgroups=[group]), now=T0)
    assert bind_map(result) == {"spark-0": "n0", "spark-1": "n0"}


def test_gated_single_pod_is_not_bound_and_gets_no_event() -> None:
    result = schedule(snapshot([node("n0")], [pod("lone", spec=GATE)]), now=T0)
    assert bind_map(result) == {}
    assert not result.events, "the API server's SchedulingGated condition says it already"


def test_every_member_of_a_gang_that_does_not_fit_is_marked_unschedulable_once() -> None:
    pods = gang_pods("train", 3, gang="train", min_available=3, cpu="4")
    first = schedule(snapshot([node("n0", cpu="8")], pods), now=T0)
    assert bind_map(first) == {}
    marked = {c.pod.name: c for c in first.pod_conditions}
    assert sorted(marked) == ["train-0", "train-1", "train-2"]
    condition = marked["train-0"]
    assert (condition.status, condition.reason) == ("False", "Unschedulable")
    assert "Insufficient cpu" in condition.message
    # The watch brings the condition back; the next failure with the same words writes nothing.
    written = [
        replace(p, scheduled_condition=("False", "Unschedulable", condition.message, "t"))
        for p in pods
    ]
    again = schedule(snapshot([node("n0", cpu="8")], written, memory=first.memory), now=T0 + 60)
    assert again.pod_conditions == ()


def test_a_gated_pods_transition_time_is_kept_when_it_becomes_unschedulable() -> None:
    gated_since = "2026-01-01T00:00:00Z"
    lone = replace(
        pod("lone", cpu="16"),
        scheduled_condition=("False", "SchedulingGated", "Scheduling is blocked", gated_since),
    )
    result = schedule(snapshot([node("n0", cpu="8")], [lone]), now=T0)
    (condition,) = result.pod_conditions
    assert condition.reason == "Unschedulable"
    assert condition.last_transition == gated_since


HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def one_per_node(app: str, key: str = HOST) -> dict:
    """Required anti-affinity against the pods labelled app=APP, per ``key`` domain."""
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    return {
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    }


def together(app: str, key: str = ZONE) -> dict:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    return {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}


def hosts(count: int, *, zone: str = "", cpu: str = "8", prefix: str = "n") -> list:
    return [
        node(
            f"{prefix}{i}", cpu=cpu, labels={HOST: f"{prefix}{i}", **({ZONE: zone} if zone else {})}
        )
        for i in range(count)
    ]


def test_gang_with_mutual_anti_affinity_puts_one_worker_on_each_node() -> None:
    pods = gang_pods(
        "worker", 4, gang="worker", min_available=4, labels={"app": "w"}, spec=one_per_node("w")
    )
    result = schedule(snapshot(hosts(6), pods), now=T0)
    placed = bind_map(result)
    assert len(placed) == 4
    assert len(set(placed.values())) == 4, placed


def test_gang_with_mutual_anti_affinity_binds_nothing_when_nodes_are_too_few() -> None:
    pods = gang_pods(
        "worker", 4, gang="worker", min_available=4, labels={"app": "w"}, spec=one_per_node("w")
    )
    result = schedule(snapshot(hosts(3), pods), now=T0)
    assert bind_map(result) == {}
    (message, *_) = events(result, "FailedScheduling")
    assert "3 node(s) didn't match pod anti-affinity rules" in message


def test_running_pods_anti_affinity_keeps_the_incoming_gang_off_its_node() -> None:
    running = pod(
        "db", node_name="n0", phase="Running", labels={"app": "db"}, spec=one_per_node("web")
    )
    pods = gang_pods("web", 2, gang="web", min_available=2, labels={"app": "web"})
    placed = bind_map(schedule(snapshot(hosts(2), [running, *pods]), now=T0))
    assert placed == {"web-0": "n1", "web-1": "n1"}


def test_existing_anti_affinity_is_said_in_kube_schedulers_words() -> None:
    running = pod(
        "db", node_name="n0", phase="Running", labels={"app": "db"}, spec=one_per_node("web")
    )
    lone = pod("web", labels={"app": "web"})
    result = schedule(snapshot(hosts(1), [running, lone]), now=T0)
    assert bind_map(result) == {}
    assert (
        "1 node(s) didn't satisfy existing pods anti-affinity rules"
        in events(result, "FailedScheduling")[0]
    )


def test_gang_with_zone_affinity_to_itself_lands_in_one_zone() -> None:
    nodes = hosts(2, zone="a", cpu="2", prefix="a") + hosts(2, zone="b", cpu="2", prefix="b")
    pods = gang_pods("ps", 4, gang="ps", min_available=4, labels={"app": "ps"}, spec=together("ps"))
    placed = bind_map(schedule(snapshot(nodes, pods), now=T0))
    assert len(placed) == 4
    # 2 cpu per node and 1 cpu per pod: the zone of the first member holds all four.
    assert len({name[0] for name in placed.values()}) == 1, placed


def test_affinity_follows_a_running_pod_to_its_zone() -> None:
    nodes = hosts(1, zone="a", prefix="a") + hosts(1, zone="b", prefix="b")
    cache = pod("cache", node_name="b0", phase="Running", labels={"app": "cache"})
    pods = gang_pods("job", 2, gang="job", min_available=2, spec=together("cache"))
    assert bind_map(schedule(snapshot(nodes, [cache, *pods]), now=T0)) == {
        "job-0": "b0",
        "job-1": "b0",
    }


def test_host_port_spreads_a_gang_and_a_clash_with_a_running_pod_is_refused() -> None:
    port = {"containers": [{"name": "main", "ports": [{"containerPort": 80, "hostPort": 8080}]}]}
    running = pod("proxy", node_name="n0", phase="Running", spec=port)
    pods = gang_pods("srv", 2, gang="srv", min_available=2, spec=port)
    result = schedule(snapshot(hosts(2), [running, *pods]), now=T0)
    assert bind_map(result) == {}, "only n1 has the port free, and only for one member"
    assert (
        "node(s) didn't have free ports for the requested pod ports"
        in events(result, "FailedScheduling")[0]
    )
    placed = bind_map(schedule(snapshot(hosts(3), [running, *pods]), now=T0))
    assert sorted(placed.values()) == ["n1", "n2"]


def test_host_ports_on_other_addresses_or_protocols_do_not_clash() -> None:
    def port(protocol: str, ip: str) -> dict:
        spec = {"containerPort": 53, "hostPort": 53, "protocol": protocol, "hostIP": ip}
        return {"containers": [{"name": "main", "ports": [spec]}]}

    running = pod("dns", node_name="n0", phase="Running", spec=port("UDP", "10.0.0.1"))
    tcp = pod("tcp", spec=port("TCP", "10.0.0.1"))
    other_ip = pod("other", spec=port("UDP", "10.0.0.2"))
    placed = bind_map(schedule(snapshot(hosts(1), [running, tcp, other_ip]), now=T0))
    assert placed == {"tcp": "n0", "other": "n0"}
    every_ip = pod("all", spec=port("UDP", ""))
    assert bind_map(schedule(snapshot(hosts(1), [running, every_ip]), now=T0)) == {}


def test_anti_affinity_with_a_namespace_selector_counts_pods_of_the_labelled_namespaces() -> None:
    term = {
        "labelSelector": {"matchLabels": {"app": "noisy"}},
        "namespaceSelector": {"matchLabels": {"team": "batch"}},
        "topologyKey": HOST,
    }
    spec = {
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    }
    batch = pod("a", namespace="etl", node_name="n0", phase="Running", labels={"app": "noisy"})
    other = pod("b", namespace="web", node_name="n1", phase="Running", labels={"app": "noisy"})
    quiet = pod("quiet", spec=spec)
    snap = replace(
        snapshot(hosts(3), [batch, other, quiet]),
        namespace_labels={"etl": {"team": "batch"}, "web": {"team": "web"}},
    )
    first = bind_map(schedule(snap, now=T0))
    # n0 holds a noisy pod of a batch namespace; n1's noisy pod is in another team's.
    crowded = replace(snap, nodes={k: v for k, v in snap.nodes.items() if k != "n2"})
    assert bind_map(schedule(crowded, now=T0)) == {"quiet": "n1"}
    assert first["quiet"] in {"n1", "n2"}


def spread(app: str, key: str = ZONE, skew: int = 1, **extra: object) -> dict:
    constraint = {
        "maxSkew": skew,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": app}},
        **extra,
    }
    return {"topologySpreadConstraints": [constraint]}


def zones(*names: str, per_zone: int = 2, cpu: str = "8") -> list:
    return [
        node(f"{z}{i}", cpu=cpu, labels={HOST: f"{z}{i}", ZONE: z})
        for z in names
        for i in range(per_zone)
    ]


def test_gang_spread_over_zones_with_max_skew_one_lands_evenly() -> None:
    pods = gang_pods("w", 6, gang="w", min_available=6, labels={"app": "w"}, spec=spread("w"))
    placed = bind_map(schedule(snapshot(zones("a", "b", "c"), pods), now=T0))
    assert len(placed) == 6
    per_zone = {z: sum(1 for n in placed.values() if n[0] == z) for z in "abc"}
    assert per_zone == {"a": 2, "b": 2, "c": 2}


def test_spread_counts_running_pods_and_refuses_a_skew_beyond_max() -> None:
    running = [pod(f"r{i}", node_name="a0", phase="Running", labels={"app": "w"}) for i in range(2)]
    # Pinned to a1 by its selector; nodeAffinityPolicy Ignore counts every zone anyway
    # (with Honor, the only domain counted would be a1's, and it would fit).
    ignore = spread("w", nodeAffinityPolicy="Ignore")
    lone = pod("new", labels={"app": "w"}, spec=ignore, node_selector={HOST: "a1"})
    result = schedule(snapshot(zones("a", "b"), [*running, lone]), now=T0)
    assert bind_map(result) == {}, "zone a has 2, zone b 0: a third in a is a skew of 3"
    honor = replace(lone, spread=pod("x", spec=spread("w")).spread)
    assert bind_map(schedule(snapshot(zones("a", "b"), [*running, honor]), now=T0)) == {"new": "a1"}
    assert (
        "node(s) didn't match pod topology spread constraints"
        in events(result, "FailedScheduling")[0]
    )


def test_spread_ignores_pods_of_other_namespaces_and_nodes_without_the_key() -> None:
    elsewhere = pod("r", namespace="other", node_name="a0", phase="Running", labels={"app": "w"})
    unlabelled = node("bare", cpu="8")
    lone = pod("new", labels={"app": "w"}, spec=spread("w"), node_selector={HOST: "a0"})
    placed = bind_map(schedule(snapshot([*zones("a", "b"), unlabelled], [elsewhere, lone]), now=T0))
    assert placed == {"new": "a0"}
    on_bare = pod("bare-one", labels={"app": "w"}, spec=spread("w"))
    result = schedule(snapshot([unlabelled], [on_bare]), now=T0)
    assert "(missing required label)" in events(result, "FailedScheduling")[0]


def test_min_domains_beyond_the_zones_there_are_makes_the_minimum_zero() -> None:
    """Two zones, minDomains 3: the global minimum counts as 0, so with maxSkew 1 each
    zone takes one matching pod and no more."""
    pods = gang_pods(
        "w", 3, gang="w", min_available=3, labels={"app": "w"}, spec=spread("w", minDomains=3)
    )
    result = schedule(snapshot(zones("a", "b"), pods), now=T0)
    assert bind_map(result) == {}
    two = gang_pods(
        "v", 2, gang="v", min_available=2, labels={"app": "v"}, spec=spread("v", minDomains=3)
    )
    placed = bind_map(schedule(snapshot(zones("a", "b"), two), now=T0))
    assert sorted(n[0] for n in placed.values()) == ["a", "b"]


def with_claim(name: str, claim: str, **kw: object) -> Pod:
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": claim}}
    return pod(name, spec={"volumes": [volume]}, **kw)  # type: ignore[arg-type]


def test_gang_whose_claim_is_missing_waits_and_says_which_claim() -> None:
    pods = [with_claim(f"db-{i}", f"data-{i}", gang="db", min_available=2) for i in range(2)]
    snap = replace(
        snapshot(hosts(2), pods),
        claims={("default", "data-0"): Claim("default", "data-0", volume="pv0")},
        volumes={"pv0": Volume("pv0")},
    )
    result = schedule(snap, now=T0)
    assert bind_map(result) == {}
    assert 'db-1: persistentvolumeclaim "data-1" not found' in events(result, "FailedScheduling")[0]
    assert {c.pod.name for c in result.pod_conditions} == {"db-0", "db-1"}


def test_a_bound_volumes_node_affinity_decides_the_node() -> None:
    on_n1 = NodeSelectorTerm(match_expressions=(Requirement(HOST, "In", ("n1",)),))
    snap = replace(
        snapshot(hosts(3), [with_claim("db", "data")]),
        claims={("default", "data"): Claim("default", "data", volume="pv", bind_completed=True)},
        volumes={"pv": Volume("pv", node_affinity=(on_n1,))},
    )
    assert bind_map(schedule(snap, now=T0)) == {"db": "n1"}
    elsewhere = replace(snap, nodes={k: v for k, v in snap.nodes.items() if k != "n1"})
    result = schedule(elsewhere, now=T0)
    assert (
        "2 node(s) didn't match PersistentVolume's node affinity"
        in events(result, "FailedScheduling")[0]
    )


def test_unbound_claims_wait_and_wait_for_first_consumer_ones_wait_for_a_volume() -> None:
    claim = Claim("default", "data", storage_class="local")
    snap = replace(
        snapshot(hosts(1), [with_claim("db", "data")]), claims={("default", "data"): claim}
    )
    immediate = schedule(snap, now=T0)
    assert bind_map(immediate) == {}
    assert (
        "pod has unbound immediate PersistentVolumeClaims"
        in events(immediate, "FailedScheduling")[0]
    )
    local = StorageClass("local", WAIT_FOR_FIRST_CONSUMER)
    delayed = schedule(replace(snap, storage_classes={"local": local}), now=T0)
    assert bind_map(delayed) == {}
    assert (
        "0/1 nodes are available: 1 node(s) didn't find available persistent volumes to bind"
        in events(delayed, "FailedScheduling")[0]
    ), "no volume there, and nothing to make one"
    off = schedule(
        replace(snap, storage_classes={"local": local}),
        now=T0,
        config=Config(bind_volumes=False),
    )
    assert "--no-bind-volumes" in events(off, "FailedScheduling")[0]


def test_a_pod_whose_resource_claim_does_not_exist_is_not_placed_and_says_why() -> None:
    claims = {"resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}]}
    result = schedule(snapshot(hosts(1), [pod("dra", spec=claims)]), now=T0)
    assert bind_map(result) == {}
    message = events(result, "FailedScheduling")[0]
    assert 'resourceclaim.resource.k8s.io "gpu-claim" not found' in message


def test_pack_fills_the_fullest_node_and_spread_the_emptiest() -> None:
    busy = pod("busy", node_name="n1", phase="Running", cpu="4")
    packed = bind_map(schedule(snapshot(hosts(3), [busy, pod("p")]), now=T0))
    assert packed == {"p": "n1"}
    spread_out = pod("s", annotations={"gang-scheduler.io/scoring": "spread"})
    assert bind_map(schedule(snapshot(hosts(3), [busy, spread_out]), now=T0)) == {"s": "n0"}
    flag = Config(scoring="spread")
    assert bind_map(schedule(snapshot(hosts(3), [busy, pod("p")]), now=T0, config=flag)) == {
        "p": "n0"
    }


def test_a_mistyped_scoring_annotation_makes_the_gang_invalid_and_says_what_is_allowed() -> None:
    pods = gang_pods(
        "g", 2, gang="g", min_available=2, annotations={"gang-scheduler.io/scoring": "packed"}
    )
    result = schedule(snapshot(hosts(1), pods), now=T0)
    assert bind_map(result) == {}
    assert "must be one of pack, spread, got 'packed'" in events(result, "InvalidGangSpec")[0]


def test_preferred_node_affinity_wins_over_packing() -> None:
    busy = pod("busy", node_name="n1", phase="Running", cpu="4")
    preferred = [{"weight": 50, "preference": {"matchExpressions": [
        {"key": HOST, "operator": "In", "values": ["n2"]}]}}]  # fmt: skip
    picky = pod("picky", spec={"affinity": {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": preferred}}})  # fmt: skip
    assert bind_map(schedule(snapshot(hosts(3), [busy, picky]), now=T0)) == {"picky": "n2"}


def test_preferred_pod_affinity_draws_to_the_zone_of_the_pods_it_names() -> None:
    nodes = hosts(1, zone="a", prefix="a") + hosts(1, zone="b", prefix="b")
    cache = pod("cache", node_name="b0", phase="Running", labels={"app": "cache"}, cpu="0")
    term = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": ZONE}
    near = pod("near", spec={"affinity": {"podAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": term}]}}})  # fmt: skip
    busy = pod("busy", node_name="a0", phase="Running", cpu="4")
    assert bind_map(schedule(snapshot(nodes, [busy, cache, near]), now=T0)) == {"near": "b0"}


def test_schedule_anyway_spread_prefers_the_emptier_zone_but_never_refuses() -> None:
    soft = spread("w", whenUnsatisfiable="ScheduleAnyway")
    running = [pod(f"r{i}", node_name="a0", phase="Running", labels={"app": "w"}) for i in range(2)]
    lone = pod("new", labels={"app": "w"}, spec=soft)
    assert bind_map(schedule(snapshot(zones("a", "b"), [*running, lone]), now=T0))["new"][0] == "b"
    only_a = pod("pinned", labels={"app": "w"}, spec=soft, node_selector={ZONE: "a"})
    assert (
        bind_map(schedule(snapshot(zones("a", "b"), [*running, only_a]), now=T0))["pinned"][0]
        == "a"
    )


def test_spread_puts_the_members_placed_in_one_pass_on_the_emptiest_nodes_each_time() -> None:
    """Found by the simulator: the spread order was the snapshot's, so every member placed
    in one pass went to the same (first emptiest) node; each is now scored as it goes."""
    pods = gang_pods("w", 3, gang="w", min_available=3, cpu="1")
    placed = bind_map(schedule(snapshot(hosts(3), pods), now=T0, config=Config(scoring="spread")))
    assert sorted(placed.values()) == ["n0", "n1", "n2"]
    packed = bind_map(schedule(snapshot(hosts(3), pods), now=T0))
    assert set(packed.values()) == {"n0"}
