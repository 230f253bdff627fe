"""Why a gang is (not) placed, in words, computed by the same core that schedules it.

``explain`` looks at one gang on a snapshot: what it declares, what it waits for, and for
each shape of member (same requests, same node constraints) how many nodes could take one
and how many of that shape the cluster could host; then it runs a pass with the gang's
backoff cleared and reports what that pass would do.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from scheduler.core import fragmentation
from scheduler.core.arranging import Arranger, Tree, tree_order
from scheduler.core.arranging import describe as describe_constraint
from scheduler.core.durations import expected_duration, history
from scheduler.core.filtering import static_reason
from scheduler.core.forecasting import forecast
from scheduler.core.gangs import Resolution, priority_of, resolve
from scheduler.core.placing import Ledger, NodeFinder
from scheduler.core.scheduling import schedule, topology_of
from scheduler.core.session import Session
from scheduler.model.config import Config
from scheduler.model.decisions import Result
from scheduler.model.forecasts import Eta, EtaState
from scheduler.model.gangs import Gang, Quorum
from scheduler.model.pods import TERMINAL_PHASES, GangKey, Pod, gang_key_of
from scheduler.model.queues import DEFAULT_QUEUE
from scheduler.model.resources import describe
from scheduler.model.snapshot import GangState, Snapshot
from scheduler.model.times import age

# The virtual passes ``explain --forecast`` plays at most (each play): a one-off look must
# answer in seconds, not minutes, on a big cluster.
EXPLAIN_PASSES = 300


def _room(requests: dict[str, int], free: dict[str, int]) -> int:
    """How many pods of ``requests`` fit in ``free``."""
    counts = [free.get(r, 0) // a for r, a in requests.items() if a > 0]
    return max(min(counts), 0) if counts else 0


def _shape_lines(members: list[Pod], snapshot: Snapshot, ledger: Ledger) -> list[str]:
    lines = []
    shapes: Counter[tuple] = Counter()
    example: dict[tuple, Pod] = {}
    for pod in members:
        shape = (
            pod.requests,
            tuple(sorted(pod.node_selector.items())),
            pod.affinity,
            pod.tolerations,
        )
        shapes[shape] += 1
        example.setdefault(shape, pod)
    total_nodes = len(snapshot.nodes)
    for shape, count in shapes.items():
        pod = example[shape]
        # Devices asked by a class's implicit name, by the name the class counts by.
        requests = dict(ledger.asks(pod)) if pod.extended else dict(pod.requests)
        rejected: Counter[str] = Counter()
        hosts = 0
        room = 0
        for name, node in sorted(snapshot.nodes.items()):
            reason = static_reason(pod, node)
            if reason:
                rejected[reason] += 1
                continue
            # Extended resources that devices serve count the node's free devices as room.
            free = ledger.room(name, requests) if pod.extended else dict(ledger.free(name))
            fits = _room(requests, free)
            if fits:
                hosts += 1
                room += fits
            else:
                for resource in pod.requests.shortfalls(free):
                    rejected[f"Insufficient {resource}"] += 1
        shown = {k: v for k, v in requests.items() if k != "pods"}
        line = (
            f"needs {count}×{describe(shown)}: {hosts} of {total_nodes} nodes could take one, "  # noqa: RUF001
            f"room for {room} in all"
        )
        if rejected:
            line += "; " + ", ".join(f"{n} {why}" for why, n in rejected.most_common())
        lines.append(line)
    return lines


def _topology_lines(
    gang: Gang, members: list[Pod], snapshot: Snapshot, config: Config, ledger: Ledger
) -> list[str]:
    """The tree the gang is placed on, and per level its constraint and where there is room."""
    topology = topology_of(snapshot, config)
    source = (
        "ConfigMap"
        if snapshot.topology is not None
        else "node labels"
        if config.topology_labels
        else "flat: no topology ConfigMap"
    )
    tree = Tree.of(topology, snapshot.nodes)
    lines = [
        f"topology {topology.name} ({source}): {' > '.join(topology.levels)}; "
        f"{len(tree.leaves)} of {len(snapshot.nodes)} nodes in it"
    ]
    lines.extend(f"topology unusable: {error}" for error in snapshot.topology_errors)
    room = Arranger(tree, NodeFinder(snapshot.nodes, ledger)).room(members, ledger=ledger)
    constraints = gang.constraints.by_level if gang.constraints else {}
    for depth, level in enumerate(topology.levels, start=1):
        units = sorted(
            ((path, n) for path, n in room.items() if len(path) == depth),
            key=lambda pn: (-pn[1], tuple(tree_order(u) for u in pn[0])),
        )
        c = constraints.get(level)
        rule = f"{describe_constraint(c)}, {'hard' if c.hard else 'soft'}" if c else "pack"
        roomy = [f"{path[-1]} {n}" for path, n in units[:3] if n]
        lines.append(
            f"level {level} [{rule}]: {sum(1 for _, n in units if n)} of {len(units)} units "
            f"have room for a member; most room: {', '.join(roomy) or 'none'}"
        )
    return lines


def explain(snapshot: Snapshot, key: GangKey, *, now: float, config: Config) -> list[str]:
    resolution = resolve(snapshot, config)
    gang = resolution.gangs.get(key)
    member = next(
        (p for p in snapshot.pods if (p.ref.namespace, p.ref.name) == (key.namespace, key.name)),
        None,
    )
    if gang is None and member is not None and gang_key_of(member) in resolution.gangs:
        # A pod's name: the gang it is in (a gang from an owner has a name nobody typed).
        found = gang_key_of(member)
        return [f"pod {key} is in gang {found}", *explain(snapshot, found, now=now, config=config)]
    if gang is None:
        names = " or ".join(sorted(config.scheduler_names))
        if key in snapshot.podgroups:
            return [f"PodGroup {key} exists but no pod with schedulerName {names} names it yet"]
        return [f"no gang {key}: no PodGroup and no pod of {names} names it"]
    bound = [p for p in gang.members if p.bound]
    pending = [
        p for p in gang.members if not p.bound and not p.deleting and p.phase not in TERMINAL_PHASES
    ]
    done = gang.completed
    lines = [
        f"gang {key}: min {gang.min_member} of {gang.total}, {gang.mode.value}, "
        f"timeout {gang.timeout_seconds:g}s; {len(gang.members)} members, {len(bound)} bound, "
        f"{len(pending)} pending"
        + (f"; {done} Succeeded count toward the minimum" if done and pending else "")
        + (" (as its Job's status counts them)" if done and pending and gang.job_progress else "")
    ]
    if gang.origin:
        lines.append(gang.origin)
    lines.extend(_duration_lines(gang, history(resolution.gangs.values())))
    if len(gang.group) > 1:
        lines.append("GangGroup: " + ", ".join(str(k) for k in gang.group))
    lines.extend([*(f"invalid: {error}" for error in gang.errors), *_subgroup_lines(gang)])
    lines.extend(_declared_lines(resolution, gang))
    if snapshot.queues is not None:
        lines.extend(_queue_lines(snapshot, gang, now=now, config=config))
    lines.extend(_memory_lines(snapshot.memory.get(key), now=now))
    if pending:
        ledger = Ledger.over(snapshot.nodes, snapshot.infos())
        lines.extend(_shape_lines(pending, snapshot, ledger))
        if gang.topology_placed:
            lines.extend(_topology_lines(gang, pending, snapshot, config, ledger))
    # What a pass would do now, the gang's backoff aside.
    memory = dict(snapshot.memory)
    memory[key] = replace(memory.get(key, GangState()), retry_at=0.0, last_message="")
    result = schedule(replace(snapshot, memory=memory), now=now, config=config)
    binding = next((g for group in result.bindings for g in group.gangs if g.gang == key), None)
    members = {p.ref for p in gang.members}
    if binding is not None:
        nodes = Counter(b.node for b in binding.bindings)
        where = ", ".join(f"{n}×{node}" for node, n in sorted(nodes.items()))  # noqa: RUF001
        lines.append(f"a pass now would bind {len(binding.bindings)} members: {where}")
        relaxed = [e.message for e in result.events if e.reason == "TopologyRelaxed"]
        if relaxed:
            lines.append(relaxed[0])
    else:
        names = {(r.namespace, r.name) for r in members}
        said = [
            e.message for e in result.events if (e.regarding.namespace, e.regarding.name) in names
        ]
        if said:
            lines.append(f"a pass now: {said[0]}")
        elif not pending:
            lines.append("nothing pending: every member is bound or finished")
        lines.extend(_preemption_lines(result, snapshot, members, pending, key))
    return lines


def eta_lines(snapshot: Snapshot, key: GangKey, *, now: float, config: Config) -> list[str]:
    """When the gang is expected to start, from a forward play of the passes to come
    (``forecasting``); nothing for a gang that is not waiting."""
    eta = forecast(snapshot, now=now, config=config, max_passes=EXPLAIN_PASSES).etas.get(key)
    if eta is None or eta.state is EtaState.FITS_NOW:
        return []
    if eta.state is EtaState.ESTIMATED and eta.p50 is not None:
        bad = f" (p90 in {age(eta.p90 - now)})" if eta.p90 not in (None, eta.p50) else ""
        if eta.p90 is None:
            bad = " (not within the play if every run takes its p90)"
        after = f", once {', '.join(map(str, eta.behind))} ended" if eta.behind else ""
        return [
            f"expected to start in {age(eta.p50 - now)}{bad}{after}: if the runs ahead of "
            "it end when expected and no gang that sorts ahead of it arrives"
        ]
    return [f"no expected start ({eta.state.value}): {eta.reason}"]


def _duration_lines(gang: Gang, runs: dict[str, tuple[float, ...]]) -> list[str]:
    """How long it is expected to run, when that is known (nothing when it is not: most
    gangs state nothing, and nothing else is said of them either)."""
    duration = expected_duration(gang, runs=runs)
    if duration.p50 is None or duration.p90 is None:
        return []
    spread = f", {age(duration.p90)} at p90" if duration.p90 != duration.p50 else ""
    return [f"expected to run for {age(duration.p50)}{spread} once bound ({duration.basis})"]


def _memory_lines(state: GangState | None, *, now: float) -> list[str]:
    """What the scheduler remembers of the gang that a person should know: a timeout, a
    stale gang's eviction to come."""
    lines = []
    if state is not None and state.timed_out:
        lines.append("timed out: it is not tried again until its pods are created anew")
    stale = state.stale if state is not None else None
    if stale is not None:
        lines.append(
            f"stale: it has run below its minimum for {now - stale.since:.0f}s; its "
            f"running members are evicted in {max(stale.due - now, 0):.0f}s unless it "
            "is whole again by then (--stale-gang-after, gang-scheduler.io/stale-after)"
        )
    return lines


def _declared_lines(resolution: Resolution, gang: Gang) -> list[str]:
    """What it waits for that is not there yet, and what its CompositePodGroup needs."""
    key, lines = gang.key, []
    if key in resolution.missing_podgroups:
        lines.append(f"waiting for PodGroup {key}, which does not exist")
    if key in resolution.missing_composites:
        lines.append(
            f"waiting for CompositePodGroup {resolution.missing_composites[key]}, which does "
            "not exist"
        )
    if gang.quorum is not None:
        lines.append(
            f"CompositePodGroup {gang.quorum.name}: {_quorum_words(gang.quorum)} placed together"
        )
    if key in resolution.missing_groups:
        lines.append(
            f"waiting for the group ConfigMap of Sakkara group {key}, which does not exist"
        )
    return lines


def _quorum_words(quorum: Quorum) -> str:
    """What a hierarchy needs, in words: "2 of [a, b, 1 of [c, d]]"."""
    parts = [_quorum_words(p) if isinstance(p, Quorum) else p.name for p in quorum.parts]
    return f"{quorum.minimum} of [{', '.join(parts)}]"


def _subgroup_lines(gang: Gang) -> list[str]:
    """Per subgroup policy: how many whole subgroups the gang needs, how many have all
    their members, how many run whole; then each subgroup in a line."""
    lines = []
    spec = gang.network_topology
    if spec is not None:
        tier = (
            f"highestTierName {spec.highest_tier_name}"
            if spec.highest_tier_name
            else f"highestTierAllowed {spec.highest_tier if spec.highest_tier is not None else 1}"
        )
        keeps = "kept" if spec.mode == "hard" else "preferably placed"
        lines.append(
            f"networkTopology {spec.mode}, {tier}: the gang is {keeps} inside one unit of that "
            "tier, the lowest tier first"
        )
    if not gang.subgroup_minimums:
        return lines
    running = {p.ref for p in gang.members if p.bound and p.alive}
    present = {p.ref for p in gang.members}
    for policy, least in gang.subgroup_minimums:
        mine = [g for g in gang.subgroups if g.policy == policy]
        complete = sum(1 for g in mine if sum(r in present for r in g.members) >= g.size)
        whole = sum(1 for g in mine if sum(r in running for r in g.members) >= g.size)
        lines.append(
            f"subgroups of policy {policy}: needs {least} whole; {len(mine)} exist, "
            f"{complete} with all their members, {whole} running whole"
        )
        for group in mine[:8]:
            on = sum(r in running for r in group.members)
            where = f", {group.topology.mode} topology" if group.topology else ""
            lines.append(
                f"  {group.name}: {on} of {group.size} running, {len(group.members)} members{where}"
            )
        if len(mine) > 8:
            lines.append(f"  ... and {len(mine) - 8} more")
    return lines


def _preemption_lines(
    result: Result, snapshot: Snapshot, members: set, pending: list[Pod], key: GangKey
) -> list[str]:
    """What the pass would evict for this gang, or why it would evict nothing (said only
    where some bound pod has a lower priority than the gang's)."""
    if not pending:
        return []
    moved = sorted((e for e in result.evictions if e.moved_to), key=lambda e: e.pod)
    if moved and any(n.pod in members and n.node for n in result.nominations):
        shown = ", ".join(f"{e.pod} to {e.moved_to}" for e in moved[:5])
        more = ", ..." if len(moved) > 5 else ""
        return [f"a pass now would move {len(moved)} pod(s) for it (consolidation): {shown}{more}"]
    classes = snapshot.priority_classes
    mine = max(priority_of(p, classes) for p in pending)
    lower = any(
        priority_of(p, classes) < mine for info in snapshot.infos().values() for p in info.pods
    )
    if not lower:
        return []
    if any(n.pod in members and n.node for n in result.nominations):
        victims = sorted(str(e.pod) for e in result.evictions)
        shown = ", ".join(victims[:5]) + (", ..." if len(victims) > 5 else "")
        fewest = [c for c in result.victim_choices if key in c.gangs]
        how = ""
        if fewest:
            choice = fewest[0]
            how = (
                " (the fewest that make room)"
                if not choice.above_fewest
                else f" (as few as {choice.fewest_possible} might make room: not every choice "
                "of victims was weighed)"
            )
        return [f"a pass now would preempt {len(victims)} pod(s) for it{how}: {shown}"]
    if any(not p.preempts for p in pending):
        return ["it would preempt nothing: a member's preemptionPolicy is Never"]
    if (podgroup := snapshot.podgroups.get(key)) is not None and not podgroup.preempts:
        return ["it would preempt nothing: its PodGroup's preemptionPolicy is Never"]
    return [
        "it would preempt nothing: no set of pods of lower priority, evicted, would let it "
        "fit (or it is not trying now)"
    ]


def _queue_lines(snapshot: Snapshot, gang: Gang, *, now: float, config: Config) -> list[str]:
    """The gang's queue and the tree of queues: what each holds against its fair
    share, and what holds its gangs back."""
    assert snapshot.queues is not None
    session = Session(snapshot, now=now, config=config)
    try:
        book = session.queues.book_of(snapshot.queues)
    finally:
        session.close()
    name = book.name_of(gang.queue)

    def amounts(values: dict) -> str:
        return describe({r: round(v) for r, v in values.items() if r != "pods" and v})

    lines = [
        f"queue {name}"
        + (
            f" (parent {book.queues[name].parent})"
            if name in book.queues and book.queues[name].parent
            else ""
        )
    ]
    problem = book.problem(gang.queue, namespace=gang.key.namespace)
    if problem is not None:
        lines.append(f"queue problem: {problem[1]}")
    lines.append("queues (what each holds / its fair share; the dominant share):")

    def walk(parent: str | None, depth: int) -> None:
        for child in book.children(parent):
            known = book.queues[child]
            limits = f"; capability {describe(known.capability)}" if known.capability else ""
            state = "" if known.open else f"; {known.state}"
            lines.append(
                f"{'  ' * (depth + 1)}{child}: {amounts(book.held[child])} / "
                f"{amounts(book.fair.get(child, {}))}, {book.share(child):.2f}{limits}{state}"
            )
            walk(child, depth + 1)

    walk(None, 0)
    return lines


def explain_cluster(snapshot: Snapshot, *, config: Config) -> list[str]:
    """``explain --cluster``: how fragmented the free room is, as the gauges say it,
    on the snapshot (the ready, schedulable nodes; our pods that wait)."""
    infos = snapshot.infos()
    names = config.scheduler_names
    usable = {
        name: node
        for name, node in snapshot.nodes.items()
        if node.ready and not node.unschedulable and name in infos
    }
    waiting = [
        p.requests
        for p in snapshot.pods
        if p.scheduler_name in names
        and not p.bound
        and not p.deleting
        and p.phase not in TERMINAL_PHASES
    ]
    topology = topology_of(snapshot, config)
    needs = [
        need
        for gang in resolve(snapshot, config).gangs.values()
        for need in fragmentation.tier_needs(gang, topology)
    ]
    found = fragmentation.measure(
        {name: infos[name].free for name in usable},
        allocatable={name: node.allocatable for name, node in usable.items()},
        waiting=waiting,
        topology=topology,
        needs=needs,
    )
    return [f"cluster: {len(usable)} ready, schedulable nodes", *fragmentation.lines(found)]


@dataclass(frozen=True, slots=True)
class Waiting:
    """One line of ``top``: a gang with members waiting, and why, as a pass on the cluster
    as it is now says (the memory of the running scheduler is not there: every gang is
    tried, none is in a backoff)."""

    key: GangKey
    queue: str
    pending: int  # members neither bound nor finished
    minimum: int
    since: float  # when its oldest waiting member was made
    why: str
    eta: str = ""  # with --forecast: when it is expected to start ("" without)


def waiting_gangs(
    snapshot: Snapshot, *, now: float, config: Config, forecasting: bool = False
) -> list[Waiting]:
    """Every gang with a member waiting, the longest waiting first (``kubectl gang top``);
    with ``forecasting``, when each is expected to start."""
    gangs = resolve(snapshot, config).gangs
    result = schedule(snapshot, now=now, config=config)
    etas = (
        forecast(snapshot, now=now, config=config, max_passes=EXPLAIN_PASSES).etas
        if forecasting
        else {}
    )
    binding = {g.gang for group in result.bindings for g in group.gangs}
    found = []
    for key, gang in gangs.items():
        pending = [p for p in gang.members if not p.bound and p.alive]
        if not pending:
            continue
        state = result.memory.get(key)
        message = state.condition[2] if state is not None and state.condition else ""
        why = "fits now: a pass binds it" if key in binding else message or "not tried yet"
        found.append(
            Waiting(
                key=key,
                queue=gang.queue or DEFAULT_QUEUE,
                pending=len(pending),
                minimum=gang.min_member,
                since=min(p.created for p in pending),
                why=why,
                eta=eta_cell(etas[key], now=now) if key in etas else ("-" if etas else ""),
            )
        )
    return sorted(found, key=lambda w: (w.since, w.key))


def eta_cell(eta: Eta, *, now: float) -> str:
    """``top``'s ETA: "now", "23m", "23m (p90 46m)", or "?" and the state without one."""
    if eta.state is EtaState.FITS_NOW:
        return "now"
    if eta.p50 is None:
        return f"? {eta.state.value}"
    bad = f" (p90 {age(eta.p90 - now)})" if eta.p90 not in (None, eta.p50) else ""
    return f"{age(eta.p50 - now)}{bad}"


def top_lines(rows: list[Waiting], *, now: float) -> list[str]:
    """``rows`` as kubectl prints a table: fixed columns, the reason last and whole."""
    if not rows:
        return ["no gang is waiting"]
    timed = any(w.eta for w in rows)  # an ETA column only when forecasts were asked for
    header = ("NAMESPACE", "GANG", "QUEUE", "WAITING", "AGE", *(("ETA",) if timed else ()),
              "REASON")  # fmt: skip
    table = [
        (w.key.namespace, w.key.name, w.queue, f"{w.pending}/{w.minimum}",
         age(now - w.since), *((w.eta,) if timed else ()), w.why)
        for w in rows
    ]  # fmt: skip
    widths = [max(len(row[i]) for row in (header, *table)) for i in range(len(header) - 1)]
    return [
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
        + "   "
        + row[-1]
        for row in (header, *table)
    ]
