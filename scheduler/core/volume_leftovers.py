"""Volume choices no one will finish: a claim still asking for its volume on a node (its
``volume.kubernetes.io/selected-node``), written by this scheduler longer ago than a group
may wait for its volumes, with no volume made and no pod using it placed.

The binder takes back what it wrote when a group's wait ends badly. A replica that dies or
loses its Lease in the middle of the wait cannot: the claim then pins its pod to that node
(kube-scheduler too filters every other node out for such a claim), and a gang that no
longer fits there would wait for good. Once the wait the writer allowed is over, with a
grace for its last writes and its take-back, the choice is released, so that the pod may
go elsewhere. Only this scheduler's own writes (the field manager that owns the
annotation) are released: another scheduler's choice is its to finish. A claim any bound
pod uses is left alone, assumed pods included, as is a group's still waiting and one this
very pass asks for again; so is a claim whose volume was made already (a volume names it,
not yet bound by the PV controller): releasing it would not free the pod, whose volume is
on that node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduler.model.decisions import VolumeRelease
from scheduler.model.nodes import NodeInfo
from scheduler.model.volumes import Claim, Volume

# After the writer's own wait: its deadline is counted from its last write, and its
# take-back needs a moment. A short wait (a test's) gets as short a grace.
GRACE_SECONDS = 60.0


def grace(timeout: float) -> float:
    return min(GRACE_SECONDS, timeout)


def _asked(claim: Claim, manager: str) -> bool:
    return (
        claim.selected_node is not None
        and claim.selected_by == manager
        and claim.selected_at is not None
        and not claim.volume
        and not claim.deleting
    )


def leftover_choices(
    claims: Mapping[tuple[str, str], Claim],
    infos: Iterable[NodeInfo],
    *,
    volumes: Iterable[Volume] = (),
    asked_now: Iterable[tuple[str, str]] = (),
    manager: str,
    timeout: float,
    now: float,
) -> tuple[tuple[VolumeRelease, ...], float | None]:
    """The choices of ``manager`` to release now, and when the next one falls due (None if
    none will). ``asked_now``: the claims this pass writes a choice for."""
    due_at = {
        claim.key: (claim.selected_at or 0.0) + timeout + grace(timeout)
        for claim in claims.values()
        if _asked(claim, manager)
    }
    if not due_at:
        return (), None
    later = min((at for at in due_at.values() if at > now), default=None)
    ripe = sorted(key for key, at in due_at.items() if at <= now)
    if not ripe:  # the common case while choices are fresh: no walk over every pod
        return (), later
    used = {(pod.ref.namespace, name) for info in infos for pod in info.pods for name in pod.claims}
    used.update(asked_now)
    made = {v.claim.uid for v in volumes if v.claim is not None and v.claim.uid}
    due = tuple(
        VolumeRelease(
            claim.namespace,
            claim.name,
            uid=claim.uid,
            node=claim.selected_node or "",
            resource_version=claim.resource_version,
        )
        for key in ripe
        if key not in used and (claim := claims[key]).uid not in made
    )
    return due, later
