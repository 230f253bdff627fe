"""Node filters that do not depend on free capacity: selectors, affinity, taints, readiness.

Each returns the reason a node is unsuitable (in kube-scheduler's words, so that the counts
in a FailedScheduling event read the same), or "" if the node is suitable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.model.nodes import NO_EXECUTE, NO_SCHEDULE, Node, Taint
from scheduler.model.pods import LabelSelector, NodeSelectorTerm, Pod, Requirement, Toleration
from scheduler.model.volumes import Claim, StorageClass, Volume

NOT_READY_TAINT = Taint("node.kubernetes.io/not-ready", "", NO_SCHEDULE)
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", NO_SCHEDULE)

NOT_READY = "node(s) were not ready"
UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
VOLUME_NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
MISSING_VOLUME = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"

VOLUME_ZONE_CONFLICT = "node(s) had no available volume zone"

# kube-scheduler's VolumeZone: a volume's zone and region labels (several zones joined by
# "__") against the node's; a beta label of the volume matches the node's GA one too.
ZONE_LABELS = (
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
)
_GA_LABEL = {ZONE_LABELS[0]: ZONE_LABELS[2], ZONE_LABELS[1]: ZONE_LABELS[3]}


@dataclass(frozen=True, slots=True)
class VolumeReach:
    """Where a bound claim's volume can be reached from: its node affinity's terms (any may
    hold; () for anywhere) and its zone labels, each (label, the zones it names)."""

    affinity: tuple[NodeSelectorTerm, ...] = ()
    zones: tuple[tuple[str, frozenset[str]], ...] = ()


# Where a pod's bound volumes let it go: per claim, its volume's reach, or None where the
# volume does not exist.
VolumeTerms = tuple[VolumeReach | None, ...]


def tolerates(tolerations: tuple[Toleration, ...], taint: Taint) -> bool:
    for t in tolerations:
        if t.effect and t.effect != taint.effect:
            continue
        if t.operator == "Exists":
            if not t.key or t.key == taint.key:
                return True
        elif t.key == taint.key and t.value == taint.value:
            return True
    return False


def _requirement_holds(requirement: Requirement, values: Mapping[str, str]) -> bool:
    op, key = requirement.operator, requirement.key
    present = key in values
    if op == "In":
        return present and values[key] in requirement.values
    if op == "NotIn":
        return not present or values[key] not in requirement.values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(requirement.values) == 1:
        try:
            have, bound = int(values[key]), int(requirement.values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """A label selector against a label set: None matches nothing, the empty one everything
    (``metav1.LabelSelectorAsSelector``)."""
    if selector is None:
        return False
    return all(labels.get(k) == v for k, v in selector.match_labels) and all(
        _requirement_holds(r, labels) for r in selector.match_expressions
    )


def term_holds(term: NodeSelectorTerm, node: Node) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False  # an empty term matches no node, as in Kubernetes
    fields = {"metadata.name": node.name}
    return all(_requirement_holds(r, node.labels) for r in term.match_expressions) and all(
        _requirement_holds(r, fields) for r in term.match_fields
    )


def matches_node(pod: Pod, node: Node) -> bool:
    """nodeSelector and required node affinity."""
    labels = node.labels
    for key, value in pod.node_selector.items():
        if labels.get(key) != value:
            return False
    return not pod.affinity or any(term_holds(term, node) for term in pod.affinity)


def named_claim(pod: Pod, name: str, claims: Mapping[tuple[str, str], Claim]) -> Claim | str:
    """The claim ``pod`` names, or why it cannot be used (kube-scheduler's PreFilter words,
    in its order)."""
    claim = claims.get((pod.ref.namespace, name))
    ephemeral = name in pod.ephemeral_claims
    if claim is None:
        if ephemeral:  # normal right after the pod is made
            return (
                "waiting for ephemeral volume controller to create the persistentvolumeclaim "
                f'"{name}"'
            )
        return f'persistentvolumeclaim "{name}" not found'
    if claim.lost:
        return (
            f'persistentvolumeclaim "{name}" bound to non-existent persistentvolume '
            f'"{claim.volume}"'
        )
    if claim.deleting:
        return f'persistentvolumeclaim "{name}" is being deleted'
    if ephemeral and claim.controller_uid != pod.ref.uid:
        # A claim of that name the pod did not make (by hand, or for an earlier pod of the
        # same name) is never its volume.
        namespace = pod.ref.namespace
        return (
            f"PVC {namespace}/{name} was not created for pod {namespace}/{pod.ref.name} "
            "(pod is not owner)"
        )
    return claim


def volume_problem(
    pod: Pod,
    *,
    claims: Mapping[tuple[str, str], Claim],
    classes: Mapping[str, StorageClass],
    binds: bool = False,
) -> str:
    """Why ``pod`` cannot be placed anywhere yet because of its storage, in kube-scheduler's
    words where it has them; "" if nothing stops it (its devices: ``claiming``). ``binds``:
    the pass binds and provisions the volumes of claims that wait for their first consumer
    (kube-scheduler's VolumeBinding), and a claim is bound once its binding is complete."""
    for name in pod.claims:
        claim = named_claim(pod, name, claims)
        if isinstance(claim, str):
            return claim
        if claim.fully_bound if binds else claim.volume:
            continue
        storage_class = classes.get(claim.storage_class)
        waits = storage_class is not None and storage_class.waits_for_first_consumer
        if binds and waits and not claim.volume:
            if claim.errors:
                return f'persistentvolumeclaim "{name}" cannot be read: {claim.errors[0]}'
            continue
        if waits and not binds:
            return (
                f'persistentvolumeclaim "{name}" waits for its first consumer (storage class '
                f'"{claim.storage_class}" binds WaitForFirstConsumer), and gang-scheduler '
                "runs with --no-bind-volumes: it binds no such claim, so the pod is not "
                "placed; bind the claim to a volume first, or run it with --bind-volumes"
            )
        return "pod has unbound immediate PersistentVolumeClaims"
    return ""


def volume_terms(
    pod: Pod, *, claims: Mapping[tuple[str, str], Claim], volumes: Mapping[str, Volume]
) -> VolumeTerms:
    """The reach of the volumes the pod's bound claims are bound to."""
    terms: list[VolumeReach | None] = []
    for name in pod.claims:
        claim = claims.get((pod.ref.namespace, name))
        if claim is None or not claim.volume:
            continue
        volume = volumes.get(claim.volume)
        terms.append(
            VolumeReach(volume.node_affinity, _zones(volume.labels)) if volume is not None else None
        )
    return tuple(terms)


def _zones(labels: Mapping[str, str]) -> tuple[tuple[str, frozenset[str]], ...]:
    zones = []
    for key in ZONE_LABELS:
        value = labels.get(key)
        if value is None:
            continue
        named = [zone.strip() for zone in value.split("__")]
        if all(named):  # a malformed label is passed over, as kube-scheduler does
            zones.append((key, frozenset(named)))
    return tuple(zones)


def volume_reason(terms: VolumeTerms, node: Node) -> str:
    """VolumeBinding's filter on the pod's bound volumes, then VolumeZone's."""
    for reach in terms:
        if reach is None:
            return MISSING_VOLUME
        affinity = reach.affinity
        if affinity and not any(term_holds(term, node) for term in affinity):
            return VOLUME_NODE_CONFLICT
    labels = node.labels
    if not any(key in labels for key in ZONE_LABELS):
        return ""  # a node without zones (a cluster of one zone) takes any volume
    for reach in terms:
        for key, zones in reach.zones if reach is not None else ():
            value = labels.get(key, labels.get(_GA_LABEL.get(key, key)))
            if value is None or value not in zones:
                return VOLUME_ZONE_CONFLICT
    return ""


def static_reason(pod: Pod, node: Node) -> str:
    """Why ``pod`` may never go on ``node`` as it is now; "" if it may."""
    if not node.ready and not tolerates(pod.tolerations, NOT_READY_TAINT):
        return NOT_READY
    if node.unschedulable and not tolerates(pod.tolerations, UNSCHEDULABLE_TAINT):
        return UNSCHEDULABLE
    if not matches_node(pod, node):
        return AFFINITY_MISMATCH
    for taint in node.taints:
        if taint.effect in (NO_SCHEDULE, NO_EXECUTE) and not tolerates(pod.tolerations, taint):
            return f"node(s) had untolerated taint {taint}"
    return ""
