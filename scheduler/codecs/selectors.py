"""Label and node selectors and their requirements, as the API writes them: shared by pod
affinity, node affinity, volumes, ResourceSlices and Volcano's subgroup policies."""

from __future__ import annotations

import functools
from collections.abc import Mapping

from scheduler.codecs.shapes import listed, obj, objs, text, texts
from scheduler.model.pods import LabelSelector, NodeSelectorTerm, Requirement, Toleration


def requirements(raw: object) -> tuple[Requirement, ...]:
    return tuple(
        Requirement(
            key=text(r.get("key")),
            operator=text(r.get("operator"), "In"),
            values=tuple(v for v in listed(r.get("values")) if isinstance(v, str)),
        )
        for r in objs(raw)
    )


def node_selector_terms(selector: object) -> tuple[NodeSelectorTerm, ...]:
    """A NodeSelector's terms (node affinity, a volume's, a ResourceSlice's)."""
    return tuple(
        NodeSelectorTerm(
            match_expressions=requirements(term.get("matchExpressions")),
            match_fields=requirements(term.get("matchFields")),
        )
        for term in objs(obj(selector).get("nodeSelectorTerms"))
    )


def tolerations(raw: object) -> tuple[Toleration, ...]:
    """A list of tolerations: a pod's, or a device request's (the same fields and rules)."""
    return tuple(
        _toleration(
            text(t.get("key")),
            text(t.get("operator"), "Equal"),
            text(t.get("value")),
            text(t.get("effect")),
        )
        for t in objs(raw)
    )


@functools.lru_cache(maxsize=1024)
def _toleration(key: str, operator: str, value: str, effect: str) -> Toleration:
    """One Toleration, shared: nearly every pod carries the same two (admission's
    not-ready and unreachable), and a frozen dataclass each was a tenth of decoding a pod.
    Bounded, so that hostile ones cannot grow it."""
    return Toleration(key=key, operator=operator, value=value, effect=effect)


def label_selector(raw: object) -> LabelSelector | None:
    """A LabelSelector; null (or not an object) is None, which matches nothing."""
    if not isinstance(raw, Mapping):
        return None
    return LabelSelector(
        match_labels=tuple(sorted(texts(raw.get("matchLabels")).items())),
        match_expressions=requirements(raw.get("matchExpressions")),
    )
