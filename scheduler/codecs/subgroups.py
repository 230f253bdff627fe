"""Volcano's ``spec.subGroupPolicy``, read field by field: every field the API server
does not check, or checks less than we need, is checked here, and a bad one is an error that
names it (the gang then waits with an InvalidGangSpec Event: never a guess).

Volcano's CRD checks ``subGroupSize`` >= 1, ``minSubGroups`` >= 0, ``mode`` hard|soft and
``highestTierAllowed`` >= 0; it does not check that names are unique, that
``highestTierAllowed`` and ``highestTierName`` are not both set (its own comment says they
cannot be), or that a label key is one; a CRD without the schema checks nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.codecs.selectors import label_selector
from scheduler.codecs.shapes import MAX_COUNT, listed, text, whole
from scheduler.model.pods import LabelSelector, NetworkTopology, SubGroupPolicy

FIELD = "spec.subGroupPolicy"
MODES = ("hard", "soft")


def subgroup_policy(raw: object, errors: list[str]) -> tuple[SubGroupPolicy, ...]:
    """The policies of ``raw`` (``spec.subGroupPolicy``); what is wrong is added to
    ``errors``, each naming its field and what is allowed."""
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple):
        errors.append(f"{FIELD} must be a list of subgroup policies, got {raw!r}")
        return ()
    policies: list[SubGroupPolicy] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw):
        where = f"{FIELD}[{i}]"
        if not isinstance(entry, Mapping):
            errors.append(f"{where} must be an object, got {entry!r}")
            continue
        name = entry.get("name", "")
        if not isinstance(name, str) or len(name) > 253:
            errors.append(f"{where}.name must be a string of at most 253 characters")
            name = ""
        label = name or str(i)
        if label in seen:
            errors.append(f"{where}.name {label!r} is used twice: each policy needs its own")
        seen.add(label)
        policies.append(
            SubGroupPolicy(
                name=label,
                size=_number(entry, "subGroupSize", where, errors, least=1, absent=1),
                min_subgroups=_number(entry, "minSubGroups", where, errors, least=0, absent=0),
                match_label_keys=_keys(entry.get("matchLabelKeys"), where, errors),
                selector=_selector(entry.get("labelSelector"), where, errors),
                topology=network_topology(entry.get("networkTopology"), where, errors),
            )
        )
    return tuple(policies)


def network_topology(
    raw: object, where: str, errors: list[str], *, named: bool = True
) -> NetworkTopology | None:
    """A ``networkTopology`` (of a PodGroup or of one of its subgroup policies; ``where``
    names the field itself unless ``named``: our annotation)."""
    if raw is None:
        return None
    field = f"{where}.networkTopology" if named else where
    if not isinstance(raw, Mapping):
        errors.append(f"{field} must be an object, got {raw!r}")
        return None
    mode = raw.get("mode", "hard")
    if mode not in MODES:
        errors.append(f"{field}.mode must be one of hard, soft; got {mode!r}")
        mode = "hard"
    tier = raw.get("highestTierAllowed")
    if tier is not None and (whole(tier) is None or not 0 <= tier <= MAX_COUNT):
        errors.append(f"{field}.highestTierAllowed must be a whole number from 0, got {tier!r}")
        tier = None
    name = text(raw.get("highestTierName"))
    if tier is not None and name:
        errors.append(
            f"{field}: highestTierAllowed and highestTierName cannot both be set "
            f"(got {tier!r} and {name!r}); keep one"
        )
    return NetworkTopology(mode=mode, highest_tier=tier, highest_tier_name=name)


def _number(
    entry: Mapping[str, object],
    key: str,
    where: str,
    errors: list[str],
    *,
    least: int,
    absent: int,
) -> int:
    raw = entry.get(key)
    if raw is None:
        return absent
    value = whole(raw)
    if value is None or not least <= value <= MAX_COUNT:
        errors.append(f"{where}.{key} must be a whole number from {least}, got {raw!r}")
        return absent
    return value


def _selector(raw: object, where: str, errors: list[str]) -> LabelSelector | None:
    """None (every pod) when absent; a value that is no selector is an error (the gang
    is not tried), never read as "every pod"."""
    if raw is not None and not isinstance(raw, Mapping):
        errors.append(f"{where}.labelSelector must be a label selector object, got {raw!r}")
        return None
    return label_selector(raw) if raw is not None else None


def _keys(raw: object, where: str, errors: list[str]) -> tuple[str, ...]:
    if raw is None:
        return ()
    keys = listed(raw)
    if not isinstance(raw, list | tuple) or not all(
        isinstance(k, str) and k and len(k) <= 317 for k in keys
    ):
        errors.append(f"{where}.matchLabelKeys must be a list of label keys, got {raw!r}")
        return ()
    return tuple(keys)
