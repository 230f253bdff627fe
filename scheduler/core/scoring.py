"""Choosing among the nodes that fit, for a pod that states preferences.

A pod without preferences takes the first node that fits in the finder's order (fullest
first to pack, emptiest first to spread): as good as scoring, and cheap. A pod with preferred
node affinity, preferred pod (anti-)affinity or ScheduleAnyway spread constraints has every
node that fits scored the way kube-scheduler's default profile weighs it: each part scaled to
0..100 over the candidates, then weighted (TaintToleration 3, NodeAffinity 2,
PodTopologySpread 2, InterPodAffinity 2, NodeResourcesFit 1), and the best one wins (ties:
the finder's order).

Not weighed (deliberately, see the README): existing pods' preferred terms towards the
incoming pod, BalancedAllocation and ImageLocality.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping

from scheduler.core.filtering import selector_matches, term_holds, tolerates
from scheduler.core.neighbouring import counted, spread_selector, term_matches
from scheduler.model.nodes import PREFER_NO_SCHEDULE, Node, NodeInfo
from scheduler.model.pods import Pod
from scheduler.model.resources import CPU, MEMORY

TAINT_WEIGHT = 3
NODE_AFFINITY_WEIGHT = 2
SPREAD_WEIGHT = 2
POD_AFFINITY_WEIGHT = 2
RESOURCE_WEIGHT = 1
MAX_SCORE = 100.0

Pair = tuple[str, str]


def _scaled(raw: Mapping[str, float], *, reverse: bool = False) -> dict[str, float]:
    """Min-max to 0..100 (higher raw is better unless ``reverse``); all alike: all 0."""
    if not raw:
        return {}
    low, high = min(raw.values()), max(raw.values())
    if high == low:
        return dict.fromkeys(raw, 0.0)
    span = high - low
    if reverse:
        return {n: MAX_SCORE * (high - v) / span for n, v in raw.items()}
    return {n: MAX_SCORE * (v - low) / span for n, v in raw.items()}


def fullness(node: Node, free: Mapping[str, int], pod: Pod) -> float:
    """The share of cpu and memory requested once the pod is there (NodeResourcesFit)."""
    shares = []
    for resource in (CPU, MEMORY):
        allocatable = node.allocatable.get(resource, 0)
        if allocatable > 0:
            used = allocatable - free.get(resource, 0) + pod.requests.get(resource, 0)
            shares.append(min(max(used / allocatable, 0.0), 1.0))
    return sum(shares) / len(shares) if shares else 0.0


def best_node(
    pod: Pod,
    candidates: list[str],
    *,
    nodes: Mapping[str, Node],
    free: Mapping[str, Mapping[str, int]],
    others: Iterable[tuple[Pod, str]],
    namespace_labels: Mapping[str, Mapping[str, str]],
    strategy: str,
) -> str:
    """The candidate with the best weighted score; ``others`` are the pods on the nodes
    (the snapshot's and those placed in this pass), with their nodes."""
    if len(candidates) == 1:
        return candidates[0]
    total: Counter[str] = Counter()
    resource = {
        n: fullness(nodes[n], free[n], pod) * MAX_SCORE for n in candidates
    }  # pack: fuller is better; spread: emptier
    for n, value in resource.items():
        total[n] += RESOURCE_WEIGHT * (value if strategy == "pack" else MAX_SCORE - value)
    untolerated = {
        n: sum(
            1
            for t in nodes[n].taints
            if t.effect == PREFER_NO_SCHEDULE and not tolerates(pod.tolerations, t)
        )
        for n in candidates
    }
    for n, value in _scaled(untolerated, reverse=True).items():
        total[n] += TAINT_WEIGHT * value
    if pod.preferred_affinity:
        liked = {
            n: float(sum(w for w, term in pod.preferred_affinity if term_holds(term, nodes[n])))
            for n in candidates
        }
        high = max(liked.values())
        for n, value in liked.items():
            total[n] += NODE_AFFINITY_WEIGHT * (MAX_SCORE * value / high if high else 0.0)
    others = list(others)
    signed = [(1, pod.preferred_pod_affinity), (-1, pod.preferred_pod_anti_affinity)]
    if pod.preferred_pod_affinity or pod.preferred_pod_anti_affinity:
        weights: Counter[Pair] = Counter()
        for other, node in others:
            if other.ref == pod.ref or node not in nodes:
                continue
            labels = nodes[node].labels
            for sign, terms in signed:
                for weight, term in terms:
                    value = labels.get(term.topology_key)
                    if value is not None and term_matches(term, other, namespace_labels):
                        weights[(term.topology_key, value)] += sign * weight
        raw = {n: float(sum(weights[p] for p in nodes[n].labels.items())) for n in candidates}
        for n, value in _scaled(raw).items():
            total[n] += POD_AFFINITY_WEIGHT * value
    soft = [c for c in pod.spread if not c.hard]
    if soft:
        raw = dict.fromkeys(candidates, 0.0)
        for constraint in soft:
            selector = spread_selector(constraint, pod)
            if selector is None or not (selector.match_labels or selector.match_expressions):
                continue
            key = constraint.topology_key
            per_domain: Counter[str] = Counter()
            for other, node in others:
                value = nodes[node].labels.get(key) if node in nodes else None
                if value is not None and counted(other, pod, selector):
                    per_domain[value] += 1
            domains = {nodes[n].labels.get(key) for n in nodes} - {None}
            weight = math.log(len(domains) + 2)
            for n in candidates:
                value = nodes[n].labels.get(key)
                # A node without the key gets the worst score, as kube-scheduler gives it.
                count = per_domain[value] if value is not None else len(others)
                raw[n] += weight * (count + int(selector_matches(selector, pod.labels)))
        for n, value in _scaled(raw, reverse=True).items():
            total[n] += SPREAD_WEIGHT * value
    return max(candidates, key=lambda n: total[n])  # max keeps the first of equals


def pods_on(infos: Mapping[str, NodeInfo], placed: Iterable[tuple[Pod, str]]) -> list:
    """The snapshot's pods with their nodes, and those placed in this pass."""
    return [(p, name) for name, info in infos.items() for p in info.pods] + list(placed)
