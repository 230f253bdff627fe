"""Label selectors and their requirements, as the API writes them: shared by pod affinity,
node affinity and Volcano's subgroup policies."""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.codecs.shapes import listed, objs, text, texts
from scheduler.model.pods import LabelSelector, Requirement


def requirements(raw: object) -> tuple[Requirement, ...]:
    return tuple(
        Requirement(
            key=text(r.get("key")),
            operator=text(r.get("operator"), "In"),
            values=tuple(v for v in listed(r.get("values")) if isinstance(v, str)),
        )
        for r in objs(raw)
    )


def label_selector(raw: object) -> LabelSelector | None:
    """A LabelSelector; null (or not an object) is None, which matches nothing."""
    if not isinstance(raw, Mapping):
        return None
    return LabelSelector(
        match_labels=tuple(sorted(texts(raw.get("matchLabels")).items())),
        match_expressions=requirements(raw.get("matchExpressions")),
    )
