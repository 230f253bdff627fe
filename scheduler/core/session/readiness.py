"""Whether a gang is ready to be tried: its spec, what it names, its members, its storage and
devices, its timeout, and a preemption it waits on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler.core.filtering import volume_problem
from scheduler.core.session.outcomes import (
    REASON_GATED,
    REASON_INVALID,
    REASON_UNSCHEDULABLE,
    REASON_WAITING,
    gated,
    pending,
)
from scheduler.model import names
from scheduler.model.gangs import Gang, Quorum
from scheduler.model.pods import SINGLE_PREFIX, GangKey, Pod, PodGroupApi
from scheduler.model.resources import describe
from scheduler.model.snapshot import GangState
from scheduler.model.status import Status

if TYPE_CHECKING:
    from scheduler.core.session.passing import Session

# A gang's members are made together, by one controller, within seconds: while they are,
# "waits until all N members exist" on each of them is noise (kube-scheduler says nothing of
# a workload still short of members; at 100 pods/s, mixed gangs of up to 256, it was one
# Event more per five pods). It is said once the gang's oldest member is this old; the
# PodGroup's condition says it (with the count) at once.
MEMBERS_ARRIVING_SECONDS = 5.0


class Readiness:
    """Whether gangs are ready to be tried, and why not."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def volume_problem(self, pod: Pod) -> str:
        """Why the pod's storage or devices keep it from being placed anywhere yet."""
        if pod.resource_claims or pod.extended:
            claims = self.session.devices.claims_of(pod)
            if isinstance(claims, str):
                return claims
        if not pod.claims:
            return ""
        snapshot = self.session.snapshot
        return volume_problem(
            pod,
            claims=snapshot.claims,
            classes=snapshot.storage_classes,
            binds=self.session.ledger.volumes is not None,
        )

    def timed_out(self, gang: Gang) -> bool:
        state = self.session.outcomes[gang.key].state
        if state.timed_out or any(p.timed_out for p in pending(gang)):
            return True
        if state.first_attempt is None or state.satisfied:
            return False
        deadline = state.first_attempt + gang.timeout_seconds
        if self.session.now >= deadline:
            return True
        self.session.wake(deadline)
        return False

    def blocker(self, gang: Gang) -> tuple[str, str, str] | None:
        """What stops ``gang`` from being tried, as (condition reason, event reason, message),
        or None: its spec is invalid, or something it names does not exist (yet)."""
        if gang.errors:
            return (
                REASON_INVALID,
                "InvalidGangSpec",
                f"gang {gang.key} is not scheduled: " + "; ".join(gang.errors),
            )
        book = self.session.queues.book
        problem = (
            book.problem(gang.queue, namespace=gang.key.namespace) if book is not None else None
        )
        if problem is not None:
            event, message, _ = problem
            return (REASON_WAITING, event, f"gang {gang.key} waits: {message}")
        if gang.key in self.session.missing_groups:
            return (
                REASON_WAITING,
                "GroupNotFound",
                f"waiting for the group ConfigMap of Sakkara group {gang.key.name}: create a "
                f"ConfigMap labelled {names.SAKKARA_GROUP} in namespace {gang.key.namespace} "
                f"with data name={gang.key.name}, size and constraints",
            )
        if gang.topology_placed and self.session.snapshot.topology_errors:
            return (
                REASON_WAITING,
                "InvalidTopology",
                f"gang {gang.key} waits for a usable topology ConfigMap: "
                + "; ".join(self.session.snapshot.topology_errors),
            )
        if gang.key in self.session.missing_owners:
            return (
                REASON_WAITING,
                "OwnerNotFound",
                f"gang {gang.key} waits: {gang.origin}; or give the pods the annotation "
                f"{names.OWNER_GANG}: none to place them one by one",
            )
        if (composite := self.session.missing_composites.get(gang.key)) is not None:
            return (
                REASON_WAITING,
                "PodGroupNotFound",
                f"gang {gang.key} waits for CompositePodGroup {gang.key.namespace}/{composite} "
                "(scheduling.k8s.io/v1alpha3), which its PodGroup's hierarchy names and which "
                "does not exist: create it (if the API server does not serve "
                "compositepodgroups, enable the CompositePodGroup feature gate and "
                "scheduling.k8s.io/v1alpha3; if it does, the scheduler's ClusterRole must let "
                "it list and watch compositepodgroups), or remove "
                "spec.parentCompositePodGroupName",
            )
        if gang.key in self.session.missing_podgroups:
            claim = next((p.gang for p in gang.members if p.gang is not None), None)
            api = claim.source.api if claim is not None else PodGroupApi.OURS
            served = (
                ""
                if api is PodGroupApi.OURS
                else f" (if the API server does not serve {api.said}, install or enable it)"
            )
            return (
                REASON_WAITING,
                "PodGroupNotFound",
                f"waiting for PodGroup {gang.key} ({api.said}), which does not exist: "
                f"create it{served}, or give the pods the annotation "
                f"{names.KOORD_MIN_AVAILABLE}",
            )
        return None

    def why_not_ready(self, unit: tuple[GangKey, ...], gangs: list[Gang]) -> str | None:
        """Say (once) why the GangGroup cannot be tried yet; None if it can."""
        for gang in gangs:
            blocked = self.blocker(gang)
            if blocked is not None:
                condition, event, message = blocked
                self.session.outcomes[gang.key].condition = ("False", condition, message)
                if self.session.outcomes[gang.key].state.last_message != message:
                    self.session.reporting.say_on_queue(gang, event)
                self.session.reporting.say(gang, reason=event, message=message, pods=pending(gang))
                return message
        for gang in gangs:
            stuck = [(p, why) for p in pending(gang) if (why := self.volume_problem(p))]
            if stuck:
                shown = "; ".join(f"{p.ref.name}: {why}" for p, why in stuck[:3])
                more = f" (and {len(stuck) - 3} more)" if len(stuck) > 3 else ""
                message = f"gang {gang.key} waits: {shown}{more}"
                for other in gangs:
                    self.session.outcomes[other.key].condition = (
                        "False",
                        REASON_UNSCHEDULABLE,
                        message,
                    )
                    self.session.reporting.say(
                        other, reason="FailedScheduling", message=message, pods=pending(other)
                    )
                    self.session.reporting.mark_unscheduled(
                        pending(other), reason=REASON_UNSCHEDULABLE, message=message
                    )
                return message
        for gang in gangs:
            missing = [k for k in unit if k not in self.session.gangs]
            # Members that completed count: a Job does not make them again. A NonStrict
            # hold is a pending member already, and a hold whose pod is gone is no member.
            have = len(pending(gang)) + gang.completed
            short = have < gang.total
            reason, event = REASON_WAITING, "GangWaiting"
            if missing:
                message = (
                    f"waiting for gang {missing[0]} of the same GangGroup, which has no pods yet"
                )
                condition = message
            elif short and (blocked := gated(gang)):
                shown = ", ".join(f"{p.ref.name} ({', '.join(p.gates)})" for p in blocked[:5])
                more = f" and {len(blocked) - 5} more" if len(blocked) > 5 else ""
                message = condition = (
                    f"gang {gang.key} waits for {len(blocked)} gated member(s): {shown}{more}; "
                    "a pod is not placed while its spec.schedulingGates list a gate, and the "
                    f"gang needs {gang.total}: whoever added the gates removes them"
                )
                reason = event = REASON_GATED
            elif short:
                # The event stays the same while members trickle in (one event, not one per
                # arrival); the condition keeps the count current.
                message = (
                    f"gang {gang.key} waits until all {gang.total} members exist before it is tried"
                )
                condition = (
                    f"gang {gang.key} has {have} of {gang.total} members; "
                    f"waiting for {gang.total - have} more"
                )
            else:
                continue
            quiet = reason == REASON_WAITING and self.members_arriving(gangs)
            for other in gangs:
                self.session.outcomes[other.key].condition = ("False", reason, condition)
                if other.key.name.startswith(SINGLE_PREFIX) or quiet:
                    continue  # a lone pod: its own PodScheduled condition says it (no Event)
                self.session.reporting.say(
                    other,
                    reason=event,
                    message=message,
                    pods=pending(other) + gated(other),
                    warning=False,
                )
            return message
        return None

    def members_arriving(self, gangs: list[Gang]) -> bool:
        """Whether the GangGroup's members may still be being made (its oldest is younger
        than MEMBERS_ARRIVING_SECONDS); if so, a pass is due when that ends."""
        oldest = min((p.created for g in gangs for p in pending(g)), default=0.0)
        told_at = oldest + MEMBERS_ARRIVING_SECONDS
        if self.session.now >= told_at:
            return False
        self.session.wake(told_at)
        return True

    def ready_parts(self, unit: tuple[GangKey, ...], gangs: list[Gang]) -> tuple[list[Gang], str]:
        """The gangs of the GangGroup that may be tried now, or none and why: all of them
        or none, as each of its gangs is needed. In a CompositePodGroup hierarchy, whose
        root needs only some of its children, each gang is judged alone (and says why it
        waits), and those ready are tried once they, with those already placed, can make
        the quorum."""
        quorum = gangs[0].quorum if gangs else None
        if quorum is None:
            why = self.why_not_ready(unit, gangs)
            return ([], why) if why is not None else (gangs, "")
        ready = [g for g in gangs if self.why_not_ready((g.key,), [g]) is None]
        placed = {g.key for g in ready} | self.placed_before(quorum)
        if quorum.met(placed):
            return ready, ""
        message = (
            f"CompositePodGroup {quorum.name} waits until enough of its PodGroups have all "
            f"their members to make its quorum ({quorum.minimum} of its "
            f"{len(quorum.parts)} children, each at its own minimum); {len(placed)} of the "
            f"{len(quorum.gangs())} PodGroups under it do"
        )
        for gang in ready:
            self.session.outcomes[gang.key].condition = ("False", REASON_WAITING, message)
            self.session.reporting.say(
                gang, reason="GangWaiting", message=message, pods=pending(gang), warning=False
            )
        return [], message

    def placed_before(self, quorum: Quorum) -> set[GangKey]:
        """The gangs of a hierarchy placed before this attempt (satisfied)."""
        gangs, outcomes = self.session.gangs, self.session.outcomes
        return {k for k in quorum.gangs() if k in gangs and outcomes[k].state.satisfied}

    def in_flight(self, gang: Gang) -> bool:
        """Whether binds of the gang are still in flight (assumed, not confirmed)."""
        flying = self.session.snapshot.in_flight
        return bool(flying) and any(p.ref.uid in flying for p in gang.members)

    def awaiting_victims(self, gang: Gang) -> bool:
        """Whether a preemptor waits for its victims: a nominated member has no room yet
        and a victim is still there. Victims on nodes it was not nominated to do not hold it
        back once every nominated member has its room (kube-scheduler never waits for them)."""
        state = self.session.outcomes[gang.key].state
        if not state.nominated or not self.victims_present(state):
            return False
        waiting = {p.ref for p in pending(gang)}
        return any(ref in waiting and ref not in state.reservations for ref in state.nominated)

    def victims_present(self, state: GangState) -> bool:
        """Whether a pod this gang evicted is still on its node (being deleted)."""
        if not state.victims:
            return False
        return any(
            p.ref.uid in state.victims for info in self.session.infos.values() for p in info.pods
        )

    def starvation_after(self, gang: Gang) -> float:
        """How long the gang may wait before it is the head gang: its own starvation-after,
        else the scheduler's."""
        if gang.starvation_seconds is not None:
            return gang.starvation_seconds
        return self.session.config.starvation_seconds

    def enough_in_total(self, gang: Gang) -> Status:
        """minResources: a cheap check of the whole gang against the whole cluster."""
        if not gang.min_resources:
            return Status.success()
        free = self.session.queues.free_total()
        short = gang.min_resources.shortfalls(free)
        if not short:
            return Status.success()
        wanted = {r: gang.min_resources[r] for r in short}
        have = {r: free.get(r, 0) for r in short}
        whose = "PodGroup minResources" if gang.podgroup is not None else "minResources"
        return Status.unschedulable(
            f"{whose} needs {describe(wanted)} in total; the cluster has {describe(have)} free"
        )
