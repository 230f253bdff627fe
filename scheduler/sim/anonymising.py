"""``gang-scheduler snapshot --anonymise``: the same cluster, its names replaced.

Namespaces, object names (nodes, pods, gangs, owners, queues, priority classes, claims...)
and label values become tokens (``s0001``, ...), one per original string, everywhere it
appears: in metadata, in references (``spec.nodeName``, owner references, a PodGroup's
queue, a Queue's parent, ``priorityClassName``, claim names), in label selectors and node
affinity, in annotations (the gang annotations name PodGroups and queues) and in the topology
ConfigMap's tree. The tokens keep the originals' sort order, so that every tie the core
breaks by name falls the same way: the anonymised snapshot gets the same decisions, renamed.

Kept as they are: label and annotation keys, resource names and quantities, the topology's
level names, numbers and booleans, the values the scheduler interprets (``spark-role``,
indices, ``sakkara.*``), the well-known names (``default``, ``kube-system``, the built-in
priority classes). Left out: annotations the scheduler does not read, container images,
commands, arguments and environments, and free text (messages of conditions).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from scheduler.model import names

# Label keys whose values the scheduler interprets (or that say nothing of anyone).
KEEP_VALUES = frozenset(
    {
        names.SPARK_ROLE,
        names.SPARK_LAUNCHED,
        names.KUBEFLOW_OPERATOR,
        names.JOB_COMPLETION_INDEX,
        names.JOBSET_JOB_INDEX,
        names.LWS_GROUP_INDEX,
        names.SAKKARA_TOPOLOGY,
        names.SAKKARA_GROUP,
        names.SAKKARA_RANK,
        names.SAKKARA_STATUS,
        names.SAKKARA_RETRIES,
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "type",  # KWOK's and others' node type (kwok), not a name
    }
)
WELL_KNOWN = frozenset(
    {
        "default",
        "root",  # Volcano's root queue: a meaning, not a name (core/queues.ROOT)
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "system-cluster-critical",
        "system-node-critical",
    }
)
# Where the topology ConfigMap is read (--topology-namespace): kept, as the flag says it.
TOPOLOGY_NS = "gang-scheduler-system"
# Fields whose string values are never names (so a name equal to one is not replaced there).
NOT_NAMES = frozenset(
    {
        "apiVersion",
        "kind",
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "deletionTimestamp",
        "lastTransitionTime",
        "startTime",
        "schedulerName",
        "phase",
        "type",
        "status",
        "reason",
        "message",
        "operator",
        "effect",
        "key",
        "topologyKey",
        "restartPolicy",
        "preemptionPolicy",
        "whenUnsatisfiable",
        "nodeAffinityPolicy",
        "nodeTaintsPolicy",
        "mode",
        "volumeBindingMode",
    }
)
# Annotation keys the scheduler reads: the prefixes of names.py, and the keys it names.
READ_ANNOTATIONS = tuple(
    sorted(
        {
            value
            for key, value in vars(names).items()
            if key.isupper() and isinstance(value, str) and ("/" in value or "." in value)
        }
    )
)
# Annotations (and labels) whose values name a gang, a queue or a priority class.
NAMING = frozenset(
    {
        names.KOORD_NAME,
        names.LEGACY_NAME,
        names.VOLCANO_GROUP_NAME,
        names.VOLCANO_QUEUE_NAME,
        names.SAKKARA_GROUP_NAME,
        names.OWNER_PRIORITY_CLASS,
    }
)
# Annotations holding JSON that names gangs ("namespace/name") or topology units.
NAMING_JSON = frozenset({names.KOORD_GROUPS, names.PLACEMENT})
_CONTAINER_DROPPED = ("image", "command", "args", "env", "envFrom", "workingDir")
_PLAIN = re.compile(r"^(-?[0-9.]+|true|false|True|False|)$")


def _kept_annotation(key: str) -> bool:
    return any(key == known or key.startswith(known) for known in READ_ANNOTATIONS)


class Renamer:
    """The mapping: collect every name first, then hand out order-keeping tokens."""

    def __init__(self, *, keep: set[str] | frozenset[str] = frozenset()) -> None:
        self._keep = WELL_KNOWN | set(keep)
        self._seen: set[str] = set()
        self._map: dict[str, str] = {}

    def add(self, value: object) -> None:
        if isinstance(value, str) and value not in self._keep and not _PLAIN.match(value):
            self._seen.add(value)

    def freeze(self) -> None:
        """Tokens in the originals' order, also against the names kept (else "alpha" <
        "default" < "zeta" would become s1, default, s3, and ties broken by name would fall
        the other way): a token starts with the kept name just below its original ("s" below
        them all), so it sorts between the same kept names."""
        ordered = sorted(self._seen)
        kept = sorted(self._keep)
        width = len(str(len(ordered)))
        self._map = {}
        for i, name in enumerate(ordered, start=1):
            below = [k for k in kept if k < name]
            prefix = f"{below[-1]}-z" if below else "a"
            self._map[name] = f"{prefix}{i:0{width}d}"

    def __call__(self, value: str) -> str:
        return self._map.get(value, value)

    def known(self, value: object) -> bool:
        return isinstance(value, str) and value in self._map

    @property
    def mapping(self) -> dict[str, str]:
        return dict(self._map)


def _bodies(document: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for bodies in document.get("lists", {}).values():
        yield from (b for b in bodies if isinstance(b, dict))


def _label_dicts(node: Any, parent: str = "") -> Iterator[dict[str, Any]]:
    """Every mapping of label key to value: labels, matchLabels, nodeSelector."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("labels", "matchLabels", "nodeSelector") and isinstance(value, dict):
                yield value
            else:
                yield from _label_dicts(value, key)
    elif isinstance(node, list):
        for item in node:
            yield from _label_dicts(item, parent)


def _expressions(node: Any) -> Iterator[dict[str, Any]]:
    """Every selector requirement ({key, operator, values}): label selectors and node
    affinity's matchExpressions and matchFields."""
    if isinstance(node, dict):
        if isinstance(node.get("values"), list) and "operator" in node and "key" in node:
            yield node
        for value in node.values():
            yield from _expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from _expressions(item)


def _tree_units(tree: Any) -> Iterator[str]:
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield key
            yield from _tree_units(value)


def _rename_tree(tree: Any, rename: Renamer) -> Any:
    if isinstance(tree, dict):
        return {rename(k): _rename_tree(v, rename) for k, v in tree.items()}
    return tree


def _json_strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from _json_strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _json_strings(item)
    elif isinstance(node, str):
        yield node


def _parts(value: str) -> list[str]:
    return value.split("/") if "/" in value else [value]


def _rename_json(node: Any, rename: Renamer) -> Any:
    def one(value: str) -> str:
        return "/".join(rename(part) for part in _parts(value))

    if isinstance(node, dict):
        return {one(k): _rename_json(v, rename) for k, v in node.items()}
    if isinstance(node, list):
        return [_rename_json(v, rename) for v in node]
    return one(node) if isinstance(node, str) else node


def _replace(node: Any, rename: Renamer, field: str = "") -> Any:
    """Every string that is a known name, outside the fields that hold none."""
    if isinstance(node, dict):
        return {
            k: json.dumps(_rename_json(_parsed(v), rename), sort_keys=True)
            if k in NAMING_JSON and _parsed(v) is not None
            else _replace(v, rename, k)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_replace(v, rename, field) for v in node]
    if isinstance(node, str) and field not in NOT_NAMES:
        return rename(node)
    return node


def _scrub(body: dict[str, Any]) -> None:
    """What the scheduler does not read and may say who someone is."""
    meta = body.get("metadata", {})
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        meta["annotations"] = {k: v for k, v in annotations.items() if _kept_annotation(k)}
    meta.pop("managedFields", None)
    meta.pop("generateName", None)
    status = body.get("status")
    if isinstance(status, dict):  # addresses say where and whose
        for key in ("podIP", "podIPs", "hostIP", "hostIPs", "addresses", "nodeInfo"):
            status.pop(key, None)
    spec = body.get("spec")
    if isinstance(spec, dict):
        for key in ("providerID", "podCIDR", "podCIDRs"):
            spec.pop(key, None)
    if not isinstance(spec, dict):
        return
    templates = [spec]
    templates += [t.get("spec", {}) for t in _templates(spec)]
    for pod_spec in templates:
        for group in ("containers", "initContainers"):
            for container in pod_spec.get(group, ()) or ():
                if isinstance(container, dict):
                    for key in _CONTAINER_DROPPED:
                        container.pop(key, None)


def _templates(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "template" and isinstance(value, dict):
                yield value
            yield from _templates(value)
    elif isinstance(node, list):
        for item in node:
            yield from _templates(item)


def anonymise(document: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The document with its names replaced, and the mapping (original -> token), which is
    not written anywhere: keep it private to undo the renaming."""
    out: dict[str, Any] = copy.deepcopy(dict(document))
    rename = Renamer(keep={out.get("metadata", {}).get("topologyNamespace", TOPOLOGY_NS)})
    topologies = out.get("lists", {}).get("topologies", [])
    for body in _bodies(out):
        _scrub(body)
        meta = body.get("metadata", {})
        rename.add(meta.get("name"))
        rename.add(meta.get("namespace"))
        for ref in meta.get("ownerReferences", ()) or ():
            rename.add(ref.get("name"))
        for held in (meta.get("annotations") or {}, meta.get("labels") or {}):
            for key, value in held.items():
                if key in NAMING:
                    rename.add(value)
                elif key in NAMING_JSON:
                    for found in _json_strings(_parsed(value)):
                        for part in _parts(found):
                            rename.add(part)
        spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
        rename.add(spec.get("nodeName"))
        rename.add(spec.get("serviceAccountName"))  # a person's name, often
        rename.add(spec.get("serviceAccount"))
        for labels in _label_dicts(body):
            for key, value in labels.items():
                if key not in KEEP_VALUES:
                    rename.add(value)
        for requirement in _expressions(body):
            if requirement["key"] not in KEEP_VALUES:
                for value in requirement["values"]:
                    rename.add(value)
    for body in topologies:
        tree = _parsed(body.get("data", {}).get("tree"))
        for unit in _tree_units(tree):
            rename.add(unit)
    rename.freeze()
    undo = {token: original for original, token in rename.mapping.items()}
    for kind, bodies in out.get("lists", {}).items():
        renamed = []
        for body in bodies:
            if kind == "topologies":
                data = dict(body.get("data", {}))
                tree = _parsed(data.get("tree"))
                body = {**body, "data": {}}  # noqa: PLW2901
                new = _replace(body, rename)
                if tree is not None:
                    data["tree"] = json.dumps(_rename_tree(tree, rename), sort_keys=True)
                new["data"] = data
            else:
                new = _replace(body, rename)
            for labels in _label_dicts(new):
                for key, value in list(labels.items()):
                    if key in KEEP_VALUES and isinstance(value, str):
                        labels[key] = undo.get(value, value)
            renamed.append(new)
        out["lists"][kind] = renamed
    out.setdefault("metadata", {})["anonymised"] = True
    return out, rename.mapping


def _parsed(raw: object) -> Any:
    if not isinstance(raw, str):
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None
