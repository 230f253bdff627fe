"""The topology ConfigMap (Sakkara's format) and the constraint JSON, read with errors that
say which key is wrong and what is expected. Nothing here raises on bad input: ConfigMap data
and annotations are whatever a user wrote, JSON nested deeper than the interpreter's stack
and numbers of more than 4,300 digits included."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.codecs.shapes import loads, obj, text, texts
from scheduler.model.topology import (
    PACK,
    SPREAD,
    Constraints,
    LevelConstraint,
    SakkaraGroup,
    Topology,
)

_EXAMPLE_TREE = '{"rack-0": {"node-0": {}, "node-1": {}}}'


def _json(data: Mapping[str, str], key: str, errors: list[str], example: str) -> Any:
    raw = data.get(key)
    if raw is None:
        errors.append(f"topology key {key!r} is missing; expected JSON such as {example}")
        return None
    parsed, problem = loads(raw)
    if problem:
        errors.append(f"topology key {key!r} is not valid JSON ({problem}); expected {example}")
    return parsed


def topology_from_configmap(
    data: Mapping[str, str], *, known_nodes: set[str] | None = None
) -> tuple[Topology | None, list[str]]:
    """A Topology, or None with the errors that make the ConfigMap unusable.

    Leaves that name unknown nodes (when ``known_nodes`` is given) and duplicate leaves are
    left out with a warning; the rest of the tree is used. ConfigMap data is strings; an
    entry that is not (only input that bypassed the API server has one) counts as missing.
    """
    data = texts(data)
    errors: list[str] = []
    levels = _json(data, "level-names", errors, '["rack", "node"]')
    tree = _json(data, "tree", errors, _EXAMPLE_TREE)
    resources = data.get("resource-names")
    resource_names: tuple[str, ...] = ("cpu", "memory")
    if resources is not None:
        parsed = _json(data, "resource-names", errors, '["cpu", "memory", "nvidia.com/gpu"]')
        if isinstance(parsed, list) and all(isinstance(r, str) for r in parsed):
            resource_names = tuple(parsed)
        elif parsed is not None:
            errors.append("topology key 'resource-names' must be a JSON list of resource names")
    if errors:
        return None, errors
    if not (isinstance(levels, list) and levels and all(isinstance(x, str) for x in levels)):
        return None, ["topology key 'level-names' must be a non-empty JSON list of level names"]
    if len(set(levels)) != len(levels):
        return None, [f"topology key 'level-names' repeats a level: {levels}"]
    if not isinstance(tree, dict):
        return None, [f"topology key 'tree' must be a JSON object such as {_EXAMPLE_TREE}"]

    paths: dict[str, tuple[str, ...]] = {}
    warnings: list[str] = []

    def walk(subtree: dict, prefix: tuple[str, ...]) -> None:
        for unit, children in sorted(subtree.items()):
            path = (*prefix, unit)
            if len(path) == len(levels):
                if children not in ({}, None):
                    errors.append(
                        f"tree entry {'/'.join(path)} is at the {levels[-1]!r} level but has "
                        "children; the tree is deeper than level-names says"
                    )
                elif unit in paths:
                    warnings.append(f"node {unit} appears twice in the tree; the first is used")
                elif known_nodes is not None and unit not in known_nodes:
                    warnings.append(f"tree names node {unit}, which does not exist; ignored")
                else:
                    paths[unit] = path
            elif isinstance(children, dict) and children:
                walk(children, path)
            else:
                errors.append(
                    f"tree entry {'/'.join(path)} stops at level {levels[len(path) - 1]!r}; "
                    f"every branch must go down to {levels[-1]!r} (levels: {levels})"
                )

    walk(tree, ())
    if errors:
        return None, errors
    name = str(data.get("name") or "cluster-topology")
    topology = Topology(
        name=name,
        levels=tuple(levels),
        paths=paths,
        resource_names=resource_names,
        warnings=tuple(warnings),
    )
    return topology, []


def _count(
    spec: Mapping[str, Any], key: str, where: str, errors: list[str], least: int
) -> int | None:
    if key not in spec:
        return None
    value = spec[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        errors.append(f"{where}: {key!r} must be a whole number of at least {least}, got {value!r}")
        return None
    return value


def read_constraints(raw: object) -> Constraints:
    """Sakkara's constraint JSON: level name -> {type, partitions, min, max, factor,
    isHard}. Level names are checked against the topology later, where it is known."""
    example = '{"rack": {"type": "pack"}, "node": {"type": "spread", "min": 2, "max": 4}}'
    if raw is not None and not isinstance(raw, str):
        return Constraints(errors=(f"constraints must be a JSON text such as {example}",))
    if raw is None or not raw.strip():
        return Constraints()
    parsed, problem = loads(raw)
    if problem:
        return Constraints(errors=(f"constraints are not valid JSON ({problem}); e.g. {example}",))
    if not isinstance(parsed, dict):
        return Constraints(
            errors=(f"constraints must be a JSON object keyed by level; e.g. {example}",)
        )
    errors: list[str] = []
    by_level: dict[str, LevelConstraint] = {}
    for level, spec in parsed.items():
        where = f"constraint for level {level!r}"
        if not isinstance(spec, dict):
            errors.append(f'{where} must be a JSON object such as {{"type": "pack"}}')
            continue
        unknown = sorted(set(spec) - {"type", "partitions", "min", "max", "factor", "isHard"})
        if unknown:
            errors.append(
                f"{where}: unknown keys {unknown}; "
                "allowed: type, partitions, min, max, factor, isHard"
            )
        kind = spec.get("type", PACK)
        if kind not in (PACK, SPREAD):
            errors.append(f"{where}: type must be pack or spread, got {kind!r}")
            kind = PACK  # reported; the model holds only types the solver knows
        partitions = _count(spec, "partitions", where, errors, 1)
        low = _count(spec, "min", where, errors, 0)
        high = _count(spec, "max", where, errors, 1)
        factor = _count(spec, "factor", where, errors, 1)
        hard = spec.get("isHard", False)
        if not isinstance(hard, bool):
            errors.append(f"{where}: isHard must be true or false, got {hard!r}")
            hard = False
        if low is not None and high is not None and low > high:
            errors.append(f"{where}: min ({low}) is greater than max ({high})")
        if factor is not None and high is not None:
            lowest = max(low or 0, 1)
            # The least multiple of factor from lowest up, worked out rather than searched
            # for: {"max": 1e12-ish, "factor": 1e12-ish} would take hours of counting.
            if -(-lowest // factor) * factor > high:
                errors.append(
                    f"{where}: no count between {lowest} and {high} is a multiple of "
                    f"factor {factor}"
                )
        by_level[level] = LevelConstraint(
            level=level,
            type=kind,
            partitions=partitions,
            min=low,
            max=high,
            factor=factor,
            hard=hard,
        )
    return Constraints(by_level=by_level, errors=tuple(errors))


def group_from_configmap(configmap: object) -> SakkaraGroup:
    """A Sakkara group ConfigMap: ``name``, ``size``, ``priority``, ``constraints``.

    Data entries that are not strings count as missing, like a ``topology_from_configmap``'s.
    """
    body = obj(configmap)
    meta, data = obj(body.get("metadata")), texts(body.get("data"))
    errors: list[str] = []
    where = f"group ConfigMap {meta.get('namespace', '')}/{meta.get('name', '')}"
    numbers: dict[str, int] = {}
    for key, least, default in (("size", 1, None), ("priority", None, 0)):
        raw = data.get(key)
        if raw is None:
            if default is None:
                errors.append(f"{where}: key {key!r} is missing; set it to the number of pods")
            numbers[key] = default or 0
            continue
        try:
            value = int(str(raw).strip())
        except ValueError:
            value = None
        if value is None or (least is not None and value < least):
            wanted = "a whole number" + (f" of at least {least}" if least is not None else "")
            errors.append(f"{where}: key {key!r} must be {wanted}, got {raw!r}")
            value = default or 0
        numbers[key] = value
    constraints = read_constraints(data.get("constraints"))
    errors.extend(f"{where}: {e}" for e in constraints.errors)
    return SakkaraGroup(
        namespace=text(meta.get("namespace"), "default"),
        name=data.get("name") or text(meta.get("name")),
        configmap=text(meta.get("name")),
        uid=text(meta.get("uid")),
        size=max(numbers["size"], 1),
        priority=numbers["priority"],
        constraints=Constraints(by_level=constraints.by_level),
        status=data.get("status", ""),
        errors=tuple(errors),
    )
