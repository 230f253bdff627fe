"""Filters that depend on the other pods: host ports and required inter-pod (anti-)affinity.

kube-scheduler's NodePorts and InterPodAffinity, for a pass that places many pods: "the other
pods" are those the snapshot shows on the nodes **and those placed earlier in the same pass
or Statement** (the ledger records them), so the members of a gang that must not share a
node spread themselves, and members that must share a zone follow the first one.

For each pod a ``Check`` is prepared once per lookup (kube-scheduler's PreFilter: the
topology pairs that the existing pods' anti-affinity forbids, and the pairs where pods that
the incoming pod's terms name are counted), then asked per node (its Filter). The counting
over the snapshot is done once per pass for each distinct set of terms; what the pass placed
is added on top.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from scheduler.core.filtering import matches_node, selector_matches, tolerates
from scheduler.model.nodes import NO_EXECUTE, NO_SCHEDULE, Node, NodeInfo
from scheduler.model.pods import HostPort, LabelSelector, Pod, PodAffinityTerm, SpreadConstraint

# kube-scheduler's words, so that FailedScheduling counts read the same.
PORTS_TAKEN = "node(s) didn't have free ports for the requested pod ports"
AFFINITY_MISMATCH = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_MISMATCH = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
SPREAD_MISSING_LABEL = (
    "node(s) didn't match pod topology spread constraints (missing required label)"
)
SPREAD_MISMATCH = "node(s) didn't match pod topology spread constraints"

WILDCARD = "0.0.0.0"  # a host port on every address

Pair = tuple[str, str]  # (topology key, value)
Placed = Iterable[tuple[Pod, str]]


def term_matches(
    term: PodAffinityTerm, pod: Pod, namespace_labels: Mapping[str, Mapping[str, str]]
) -> bool:
    """``AffinityTerm.Matches``: the pod is in one of the term's namespaces (or one its
    namespace selector matches) and its labels match the term's selector."""
    namespace = pod.ref.namespace
    if namespace not in term.namespaces and not selector_matches(
        term.namespace_selector, namespace_labels.get(namespace, {})
    ):
        return False
    return selector_matches(term.selector, pod.labels)


def ports_conflict(wanted: Iterable[HostPort], used: Iterable[HostPort]) -> bool:
    """``HostPortInfo.CheckConflict``: the same protocol and port, on the same address or
    where either side binds every address."""
    taken = list(used)
    for want in wanted:
        for have in taken:
            if (want.protocol, want.port) != (have.protocol, have.port):
                continue
            if WILDCARD in (want.ip, have.ip) or want.ip == have.ip:
                return True
    return False


def spread_selector(constraint: SpreadConstraint, pod: Pod) -> LabelSelector | None:
    """The constraint's selector with the pod's values of its matchLabelKeys added (none
    added to a null selector, which matches nothing), as kube-scheduler merges them."""
    selector = constraint.selector
    extra = tuple((k, pod.labels[k]) for k in constraint.match_label_keys if k in pod.labels)
    if selector is None or not extra:
        return selector
    return LabelSelector(selector.match_labels + extra, selector.match_expressions)


@dataclass(frozen=True, slots=True)
class Spread:
    """One DoNotSchedule constraint, prepared: matching pods per domain of the nodes it
    counts, the global minimum, and whether the pod counts itself."""

    key: str
    max_skew: int
    counts: Mapping[str, int]
    minimum: int
    self_match: int


@dataclass(frozen=True, slots=True)
class Check:
    """The prepared filter for one pod; ``reason(node)`` is "" where it may go."""

    pod: Pod
    nodes: Mapping[str, Node]
    ports_on: Callable[[str], list[HostPort]]
    forbidden: frozenset[Pair]  # by existing pods' anti-affinity
    affinity: Counter[Pair]  # pods matching all of the pod's affinity terms, per pair
    anti: frozenset[Pair]  # where pods its anti-affinity terms name are
    first_of_its_kind: bool  # no pod matches its affinity terms, and it matches them itself
    spreads: tuple[Spread, ...] = ()

    def reason(self, node: str) -> str:
        """kube-scheduler's filter order: NodePorts, (room), PodTopologySpread,
        InterPodAffinity; room is the caller's."""
        pod = self.pod
        if pod.host_ports and ports_conflict(pod.host_ports, self.ports_on(node)):
            return PORTS_TAKEN
        return self.spread_reason(node) or self.affinity_reason(node)

    def spread_reason(self, node: str) -> str:
        """PodTopologySpread's Filter: existing matching pods in the node's domain, plus the
        pod itself if it matches, minus the global minimum, at most maxSkew."""
        labels = self.nodes[node].labels
        for spread in self.spreads:
            value = labels.get(spread.key)
            if value is None:
                return SPREAD_MISSING_LABEL
            skew = spread.counts.get(value, 0) + spread.self_match - spread.minimum
            if skew > spread.max_skew:
                return SPREAD_MISMATCH
        return ""

    def affinity_reason(self, node: str) -> str:
        """InterPodAffinity's Filter, in its order: affinity, anti-affinity, existing."""
        labels = self.nodes[node].labels
        pod = self.pod
        if pod.pod_affinity:
            everywhere = True
            for term in pod.pod_affinity:
                value = labels.get(term.topology_key)
                if value is None:
                    return AFFINITY_MISMATCH  # every topology key must be on the node
                if self.affinity[(term.topology_key, value)] <= 0:
                    everywhere = False
            if not everywhere and not self.first_of_its_kind:
                return AFFINITY_MISMATCH
        if self.anti:
            for term in pod.pod_anti_affinity:
                value = labels.get(term.topology_key)
                if value is not None and (term.topology_key, value) in self.anti:
                    return ANTI_AFFINITY_MISMATCH
        if self.forbidden and any(pair in self.forbidden for pair in labels.items()):
            return EXISTING_ANTI_AFFINITY
        return ""


def counted(other: Pod, pod: Pod, selector: LabelSelector) -> bool:
    """``countPodsMatchSelector``: not being deleted, same namespace, labels match."""
    return (
        not other.deleting
        and other.ref.namespace == pod.ref.namespace
        and selector_matches(selector, other.labels)
    )


class Neighbours:
    """The other pods, for one pass: which of them carry required anti-affinity, and the
    per-pass counts of the snapshot's pods by affinity terms."""

    def __init__(
        self,
        nodes: Mapping[str, Node],
        infos: Mapping[str, NodeInfo],
        *,
        namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self._nodes = nodes
        self._infos = infos
        self._namespaces = namespace_labels or {}
        self._anti: list[tuple[Pod, str]] | None = None
        self.counted: dict[tuple, tuple[Counter[Pair], frozenset[Pair]]] = {}
        self._eligible_by: dict[tuple, dict[str, str]] = {}
        self._spread_by: dict[tuple, dict[str, int]] = {}

    @property
    def namespace_labels(self) -> Mapping[str, Mapping[str, str]]:
        return self._namespaces

    def _existing(self) -> Iterable[tuple[Pod, str]]:
        for name, info in self._infos.items():
            if name in self._nodes:
                for pod in info.pods:
                    yield pod, name

    @property
    def anti_holders(self) -> list[tuple[Pod, str]]:
        """The snapshot's pods with required anti-affinity, and their nodes."""
        if self._anti is None:
            nodes = self._nodes
            self._anti = [
                (p, name)
                for name, info in self._infos.items()
                if info.anti_affinity and name in nodes
                for p in info.anti_affinity
            ]
        return self._anti

    def inert(self, pod: Pod, *, placed_anti_affinity: bool) -> bool:
        """Nothing here can turn a node away from ``pod``: the common case, kept cheap."""
        return not (pod.neighbourly or self.anti_holders or placed_anti_affinity)

    def check(self, pod: Pod, placed: list[tuple[Pod, str]]) -> Check:
        """Prepare the filter for ``pod``; ``placed`` are the pods placed in this pass so
        far (not in the snapshot's node infos), with their nodes."""
        namespaces = self._namespaces
        forbidden: set[Pair] = set()
        for holder, node in [*self.anti_holders, *placed]:
            if not holder.pod_anti_affinity or holder.ref == pod.ref:
                continue
            labels = self._nodes[node].labels if node in self._nodes else {}
            for term in holder.pod_anti_affinity:
                value = labels.get(term.topology_key)
                if value is not None and term_matches(term, pod, namespaces):
                    forbidden.add((term.topology_key, value))
        affinity: Counter[Pair] = Counter()
        anti: set[Pair] = set()
        if pod.pod_affinity or pod.pod_anti_affinity:
            base_affinity, base_anti = self._counts(pod)
            affinity.update(base_affinity)
            anti.update(base_anti)
            self._count(pod, placed, affinity, anti)
        first = (
            bool(pod.pod_affinity)
            and not affinity
            and all(term_matches(t, pod, namespaces) for t in pod.pod_affinity)
        )
        return Check(
            pod=pod,
            nodes=self._nodes,
            ports_on=lambda node: self._ports_on(node, placed),
            forbidden=frozenset(forbidden),
            affinity=affinity,
            anti=frozenset(anti),
            first_of_its_kind=first,
            spreads=self._spreads(pod, placed),
        )

    def _spreads(self, pod: Pod, placed: list[tuple[Pod, str]]) -> tuple[Spread, ...]:
        hard = [c for c in pod.spread if c.hard]
        if not hard:
            return ()
        keys = {c.topology_key for c in hard}
        spreads = []
        for constraint in hard:
            selector = spread_selector(constraint, pod)
            counts = dict(self._spread_counts(pod, constraint, selector, keys))
            if selector is not None and (selector.match_labels or selector.match_expressions):
                eligible = self._eligible(pod, constraint, keys)
                for other, node in placed:
                    value = eligible.get(node)
                    if value is not None and counted(other, pod, selector):
                        counts[value] = counts.get(value, 0) + 1
            minimum = min(counts.values()) if len(counts) >= constraint.min_domains else 0
            spreads.append(
                Spread(
                    key=constraint.topology_key,
                    max_skew=constraint.max_skew,
                    counts=counts,
                    minimum=minimum,
                    self_match=int(selector_matches(selector, pod.labels)),
                )
            )
        return tuple(spreads)

    def _eligible(
        self, pod: Pod, constraint: SpreadConstraint, keys: set[str]
    ) -> Mapping[str, str]:
        """The nodes the constraint counts, with their value of its key: those with every
        hard constraint's key, that match the pod's node affinity and selector (unless the
        policy is Ignore) and whose taints it tolerates (if the policy is Honor)."""
        cache_key = (
            constraint.topology_key,
            constraint.honor_node_affinity,
            constraint.honor_node_taints,
            tuple(sorted(keys)),
            tuple(sorted(pod.node_selector.items())),
            pod.affinity,
            pod.tolerations,
        )
        known = self._eligible_by.get(cache_key)
        if known is None:
            eligible: dict[str, str] = {}
            for name, node in self._nodes.items():
                labels = node.labels
                if not all(k in labels for k in keys):
                    continue
                if constraint.honor_node_affinity and not matches_node(pod, node):
                    continue
                if constraint.honor_node_taints and any(
                    t.effect in (NO_SCHEDULE, NO_EXECUTE) and not tolerates(pod.tolerations, t)
                    for t in node.taints
                ):
                    continue
                eligible[name] = labels[constraint.topology_key]
            known = self._eligible_by[cache_key] = eligible
        return known

    def _spread_counts(
        self,
        pod: Pod,
        constraint: SpreadConstraint,
        selector: LabelSelector | None,
        keys: set[str],
    ) -> Mapping[str, int]:
        """The snapshot's matching pods per domain (every counted domain present, at 0 if
        empty); once per pass for each namespace, selector and set of counted nodes."""
        eligible = self._eligible(pod, constraint, keys)
        cache_key = (pod.ref.namespace, selector, id(eligible))
        known = self._spread_by.get(cache_key)
        if known is None:
            counts: dict[str, int] = dict.fromkeys(eligible.values(), 0)
            if selector is not None and (selector.match_labels or selector.match_expressions):
                for name, value in eligible.items():
                    info = self._infos.get(name)
                    for other in info.pods if info is not None else ():
                        if counted(other, pod, selector):
                            counts[value] += 1
            known = self._spread_by[cache_key] = counts
        return known

    def _counts(self, pod: Pod) -> tuple[Counter[Pair], frozenset[Pair]]:
        """The snapshot's share of the counts; the same for every pod with the same terms."""
        key = (pod.pod_affinity, pod.pod_anti_affinity)
        counted = self.counted.get(key)
        if counted is None:
            affinity: Counter[Pair] = Counter()
            anti: set[Pair] = set()
            self._count(pod, self._existing(), affinity, anti)
            counted = self.counted[key] = (affinity, frozenset(anti))
        return counted

    def _count(self, pod: Pod, others: Placed, affinity: Counter[Pair], anti: set[Pair]) -> None:
        namespaces = self._namespaces
        for other, node in others:
            if other.ref == pod.ref or node not in self._nodes:
                continue
            labels = self._nodes[node].labels
            if pod.pod_affinity and all(
                term_matches(t, other, namespaces) for t in pod.pod_affinity
            ):
                for term in pod.pod_affinity:
                    value = labels.get(term.topology_key)
                    if value is not None:
                        affinity[(term.topology_key, value)] += 1
            for term in pod.pod_anti_affinity:
                value = labels.get(term.topology_key)
                if value is not None and term_matches(term, other, namespaces):
                    anti.add((term.topology_key, value))

    def _ports_on(self, node: str, placed: list[tuple[Pod, str]]) -> list[HostPort]:
        info = self._infos.get(node)
        used = [port for p in info.pods for port in p.host_ports] if info is not None else []
        used.extend(port for p, n in placed if n == node for port in p.host_ports)
        return used
