"""Closing a session into a Result: the gangs' memory and PodGroup statuses, and the
ResourceClaim writes each GroupBinding's binds need."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from scheduler.core.fragmentation import tier_needs, tiered
from scheduler.core.session.outcomes import pending
from scheduler.core.statuses import desired_status, expected_start_mark
from scheduler.core.volume_leftovers import leftover_choices
from scheduler.model import names
from scheduler.model.decisions import (
    WARNING,
    ClaimWrite,
    Event,
    GroupBinding,
    ObjectRef,
    PodPatch,
    Result,
    StatusUpdate,
    VolumeRelease,
    VolumeWrite,
)
from scheduler.model.devices import Allocation, ResourceClaim
from scheduler.model.forecasts import Forecast
from scheduler.model.gangs import Gang
from scheduler.model.pods import SINGLE_PREFIX, GangKey, PodGroupApi, PodRef
from scheduler.model.snapshot import GangState

if TYPE_CHECKING:
    from scheduler.core.session.passing import Session


def _held_back(session: Session, group: GroupBinding, why: str) -> None:
    message = f"internal error: {why}; nothing of the group is bound in this pass"
    for gang in group.gangs:
        ref = gang.bindings[0].pod
        pod = ObjectRef("Pod", ref.namespace, ref.name, ref.uid)
        session.add(session.events, Event(pod, WARNING, "FailedScheduling", message))


def claims_in_play(session: Session) -> bool:
    """Any claim in the snapshot, or any pod with one: a walk over every member, made
    once a pass (the early binds and the claim writes both ask)."""
    ledger = session.ledger
    return (
        bool(session.devices.claims)
        or any(session.devices.asks_devices(p) for g in session.gangs.values() for p in g.members)
        or (
            ledger.volumes is not None
            and any(
                ledger.volumes.world.delays(p) for g in session.gangs.values() for p in g.members
            )
        )
    )


def _claimed(session: Session, groups: list[GroupBinding]) -> tuple[GroupBinding, ...]:
    """Each group with what its binds write to ResourceClaims first. A pod with claims
    and no plan for them (a path that placed it without its devices: a bug) is never
    bound: its whole group is held back, and says so."""
    if not session.claims_in_play:
        return tuple(groups)
    # By uid: a PodRef compares by name, and a pod made again under the same name may
    # still be in the snapshot beside the one it replaced.
    pods = {p.ref.uid: p for g in session.gangs.values() for p in g.members}
    done: list[GroupBinding] = []
    for group in groups:
        made: dict[tuple[str, str], Allocation] = {}
        claims: dict[tuple[str, str], ResourceClaim] = {}
        reserve: dict[tuple[str, str], list[PodRef]] = {}
        mappings: dict[tuple[str, str], tuple[tuple[str, str, str], ...]] = {}
        broken = ""
        for binding in group.bindings:
            pod = pods.get(binding.pod.uid)
            if pod is None or not session.ledger.asks_devices(pod):
                continue
            plan = session.ledger.plan_of(binding.pod, binding.node)
            if plan is None:
                broken = f"{binding.pod} has no devices planned on {binding.node}"
                break
            made.update((claim.key, allocation) for claim, allocation in plan.allocate)
            if plan.extended is not None:
                mappings[plan.extended.key] = plan.mappings
            for claim in plan.reserve:
                claims[claim.key] = claim
                reserve.setdefault(claim.key, []).append(binding.pod)
        if broken:
            _held_back(session, group, broken)
            continue
        writes = tuple(
            ClaimWrite(
                namespace=key[0],
                name=key[1],
                uid=claim.uid,
                resource_version=claim.resource_version,
                # What the pods rely on: made by this group's plan, or earlier in the pass
                # (a held member's), or before it (a write still in flight included: the
                # writer allocates it if the claim does not show it yet).
                allocation=made.get(key) or claim.allocation or session.ledger.allocated(key),
                pods=tuple(reserve[key]),
                requests=claim.requests if key in mappings else (),
                mappings=mappings.get(key, ()),
                **_groups(session, key, reserve[key]),
            )
            for key, claim in claims.items()
        )
        done.append(replace(group, claims=writes) if writes else group)
    return tuple(done)


def _volumed(session: Session, groups: tuple[GroupBinding, ...]) -> tuple[GroupBinding, ...]:
    """Each group with the volumes its binds choose or have made first. A pod asking
    volumes with no plan for them (a bug of a placing path) is never bound: its whole group
    is held back, and says so."""
    ledger = session.ledger
    if ledger.volumes is None or not session.claims_in_play:
        return groups
    world = ledger.volumes.world
    # By uid: a PodRef compares by name, and a pod made again under the same name may
    # still be in the snapshot beside the one it replaced.
    pods = {p.ref.uid: p for g in session.gangs.values() for p in g.members}
    done: list[GroupBinding] = []
    for group in groups:
        writes: list[VolumeWrite] = []
        broken = ""
        for binding in group.bindings:
            pod = pods.get(binding.pod.uid)
            if pod is None or not world.delays(pod):
                continue
            plan = ledger.volume_plan_of(binding.pod, binding.node)
            if plan is None:
                broken = f"{binding.pod} has no volumes planned on {binding.node}"
                break
            writes.extend(
                VolumeWrite(
                    claim.namespace,
                    claim.name,
                    claim.uid,
                    binding.pod,
                    volume=v.name,
                    resource_version=v.resource_version,
                    prebound=v.claim is not None and bool(v.claim.uid),
                )
                for claim, v in plan.bindings
            )
            writes.extend(
                VolumeWrite(claim.namespace, claim.name, claim.uid, binding.pod, node=binding.node)
                for claim in plan.provisions
            )
        if broken:
            _held_back(session, group, broken)
            continue
        # A claim its pods share is written once: by the first pod of the group to use it.
        once: dict[tuple[str, str], VolumeWrite] = {}
        for write in writes:
            once.setdefault((write.namespace, write.name), write)
        done.append(replace(group, volumes=tuple(once.values())) if writes else group)
    return tuple(done)


def _stale_claims(session: Session) -> tuple[tuple[str, str], ...]:
    """The claims made for pending pods' extended resources (an attempt that did not
    bind left them): to be deleted, so that the pods are tried again with new ones."""
    made_for = session.devices.made_for
    if not made_for:
        return ()
    return tuple(
        sorted(
            made_for[p.ref.uid].key
            for g in session.gangs.values()
            for p in g.members
            if p.extended and not p.node_name and p.ref.uid in made_for
        )
    )


def _volume_releases(
    session: Session, bindings: tuple[GroupBinding, ...]
) -> tuple[VolumeRelease, ...]:
    config = session.config
    if not config.bind_volumes:
        return ()
    due, later = leftover_choices(
        session.snapshot.claims,
        session.infos.values(),
        volumes=session.snapshot.volumes.values(),
        asked_now=((w.namespace, w.name) for g in bindings for w in g.volumes),
        manager=config.scheduler_name,
        timeout=config.volume_bind_timeout_seconds,
        now=session.now,
    )
    if later is not None:
        session.wake(later)
    return due


def _expected_start_marks(
    session: Session, gang: Gang, forecast: Forecast | None
) -> list[PodPatch]:
    """A gang without a PodGroup says its estimate on its first waiting pod
    (``names.EXPECTED_START``); the mark is taken off the others, and off every member once
    it is placed or no play has looked at it. A PodGroup of any kind says it in a condition
    (``desired_status``): its members carry no mark."""
    outcome = session.outcomes[gang.key]
    state = outcome.state
    if gang.key.name.startswith(SINGLE_PREFIX) and not any(p.expected_start for p in gang.members):
        # A pod of no gang, placed as kube-scheduler would: a backlog of them would cost a
        # write each.
        return []
    placed = state.satisfied or state.timed_out or outcome.bindings
    todo = [] if placed or gang.podgroup is not None else pending(gang)
    lead = session.order.ordered(todo)[0].ref if todo else None
    said = expected_start_mark(forecast.etas.get(gang.key)) if forecast and lead else ""
    marks = []
    for pod in gang.members:
        wanted = said if pod.ref == lead else ""
        if pod.expected_start != wanted and pod.alive:  # a pod going needs no word of it
            marks.append(PodPatch(pod.ref, {names.EXPECTED_START: wanted or None}))
    return marks


def close(session: Session) -> Result:
    statuses: list[StatusUpdate] = []
    # Gangs the snapshot left out (settled, or parked) keep what was remembered of them;
    # a parked one must still be looked at when its flush or timeout falls due, a stale
    # one when its grace ends.
    memory: dict[GangKey, GangState] = dict(session.snapshot.memory)
    for key, state in memory.items():
        if state.stale is not None:
            # Whether or not the pass got to it (a turn may end early).
            session.wake(state.stale.due)
        if key in session.gangs:
            continue
        if state.parked is not None:
            session.wake(state.parked.due_at)
    waiting = sum(
        1
        for key, state in memory.items()
        if key not in session.gangs
        and state.parked is not None
        and not (state.satisfied or state.timed_out)
    )
    forecast = session.snapshot.forecast
    # The tree only where a gang states a tier: a flat one sorts every node.
    any_tiered = False
    for key, gang in session.gangs.items():
        outcome = session.outcomes[key]
        states_tier = tiered(gang)
        any_tiered = any_tiered or states_tier
        needs = tier_needs(gang, session.topology) if states_tier and not outcome.bindings else ()
        memory[key] = replace(outcome.state, condition=outcome.condition, tier_needs=needs)
        if not (outcome.state.satisfied or outcome.state.timed_out) and pending(gang):
            waiting += 1
        if gang.podgroup is None or gang.podgroup.api is not PodGroupApi.OURS:
            # Our own PodGroup's members never carried a mark: no walk of them each pass.
            # Upstream and Volcano ones did, before their PodGroup said it: taken off.
            session.add(session.patches, *_expected_start_marks(session, gang, forecast))
        if gang.podgroup is None:
            continue
        status = desired_status(
            gang,
            binding_now={b.pod for b in outcome.bindings},
            first_attempt=outcome.state.first_attempt,
            timed_out=outcome.state.timed_out,
            condition=outcome.condition,
            below_min=outcome.below_min if outcome.state.satisfied else None,
            satisfied=outcome.state.satisfied,
            now=session.now,
            queue_held=gang.podgroup.api is PodGroupApi.VOLCANO
            and not outcome.bindings
            and session.queues.holds_back(gang),
            eta=None if forecast is None or outcome.bindings else forecast.etas.get(key),
        )
        if status != gang.podgroup.status:
            statuses.append(StatusUpdate(key, status, gang.podgroup.api, gang.podgroup.api_version))
    bindings = _volumed(session, _claimed(session, session.bindings))
    releases = _volume_releases(session, bindings)  # before wake_at is read: it may wake
    return Result(
        bindings=bindings,
        pod_patches=tuple(session.patches),
        pod_conditions=tuple(session.conditions),
        # One eviction a pod: a stale gang's member may be a preemption's victim too.
        evictions=tuple({e.pod: e for e in reversed(session.evictions)}.values())[::-1],
        victim_choices=tuple(session.victim_choices),
        # One nomination a pod, the last: a nomination let go as the pass opened may be
        # followed by a new preemption's, and both are sent at once.
        nominations=tuple({n.pod: n for n in session.nominations}.values()),
        status_updates=tuple(statuses),
        events=tuple(session.events),
        memory=memory,
        wake_at=session.wake_at,
        queue_usage=session.queues.usage,
        attempts=tuple(a for a in session.attempts if a.verdict.tried),
        errors=tuple(session.errors),
        topology_notes=session.topology_notes,
        stale_claims=_stale_claims(session),
        volume_releases=releases,
        topology=session.topology if any_tiered else None,
        pending_gangs=waiting,
    )


def _groups(session: Session, key: tuple[str, str], pods: list[PodRef]) -> dict:
    """The PodGroups a claim is reserved for on behalf of ``pods`` (those of them whose
    PodGroup shares it), and which pods that covers."""
    shared = session.devices.shared
    found = {ref.uid: shared[(ref.uid, key)] for ref in pods if (ref.uid, key) in shared}
    if not found:
        return {}
    return {"groups": tuple(dict.fromkeys(found.values())), "grouped": frozenset(found)}
