"""Label and node selectors and their requirements, as the API writes them: shared by pod
affinity, node affinity, volumes, ResourceSlices and Volcano's subgroup policies."""

from __future__ import annotations

import functools
import re
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


# A label selector as kubectl and the API's ``labelSelector`` query parameter write it
# (apimachinery's ``labels.Parse``): requirements separated by commas, each ``key``,
# ``!key``, ``key=value``, ``key==value``, ``key!=value``, ``key in (a,b)``,
# ``key notin (a,b)``, ``key>1`` or ``key<1``.
SELECTOR_SYNTAX = (
    'a label selector as kubectl takes it, requirements separated by commas: "team=a", '
    '"team!=b", "team in (a,b)", "team notin (c)", "team", "!team"'
)
_TOKEN = re.compile(r"\s*(==|!=|=|!|,|\(|\)|<|>|[^\s,()=!<>]+)")
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_PUNCTUATION = frozenset({"=", "==", "!=", "!", "(", "<", ">"})
_OPERATORS = {"=": "In", "==": "In", "!=": "NotIn", "in": "In", "notin": "NotIn"}


def label_key_error(key: str) -> str:
    """Why ``key`` is not a label key ("" if it is)."""
    return _key_error(key)


def _key_error(key: str) -> str:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _PREFIX.fullmatch(prefix)):
        return f"key {key!r} has a prefix that is not a DNS subdomain"
    if not _NAME.fullmatch(name):
        return (
            f"key {key!r} is not a label key: at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit, after an optional 'prefix/'"
        )
    return ""


def _value_error(value: str) -> str:
    if value and not _NAME.fullmatch(value):
        return (
            f"value {value!r} is not a label value: at most 63 letters, digits, '-', '_' or "
            "'.', starting and ending with a letter or digit"
        )
    return ""


class _Malformed(ValueError):
    """What is wrong with a selector, in words."""


def _tokens(written: str) -> list[str]:
    tokens: list[str] = []
    at = 0
    while (found := _TOKEN.match(written, at)) is not None:  # None: only blanks are left
        tokens.append(found.group(1))
        at = found.end()
    return tokens


def _values(tokens: list[str], i: int, *, key: str, operator: str) -> tuple[tuple[str, ...], int]:
    """The values of ``key in (...)`` from the bracket at ``i``, and the index after it. An
    empty place in the list (``()``, ``(a,)``, ``(a,,b)``) is the empty value, as the API
    server reads it."""
    if tokens[i : i + 1] != ["("]:
        raise _Malformed(f"'{key} {operator}' needs its values in brackets, e.g. (a,b)")
    values: list[str] = []
    wanted = True  # a value (or an empty place) comes next
    i += 1
    while i < len(tokens) and tokens[i] != ")":
        token = tokens[i]
        if token == ",":
            if wanted:
                values.append("")
            wanted = True
        elif token in _PUNCTUATION or not wanted:
            raise _Malformed(f"{token!r} in '{key} {operator} (...)' where ',' or ')' belongs")
        else:
            values.append(token)
            wanted = False
        i += 1
    if i >= len(tokens):
        raise _Malformed(f"'{key} {operator} (' is not closed with ')'")
    if wanted:
        values.append("")
    for value in values:
        _check_value(value)
    return tuple(dict.fromkeys(values)), i + 1


def _check_value(value: str) -> None:
    if error := _value_error(value):
        raise _Malformed(error)


def _requirement(tokens: list[str], i: int) -> tuple[Requirement, int]:
    """The requirement that starts at ``i``, and the index after it."""
    negated = tokens[i] == "!"
    i += negated
    key = tokens[i] if i < len(tokens) else ""
    if not key or key in _OPERATORS or key in _PUNCTUATION or key in (",", ")"):
        raise _Malformed(f"a key is missing at {' '.join(tokens[: i + 1])!r}")
    if error := _key_error(key):
        raise _Malformed(error)
    i += 1
    operator = tokens[i] if i < len(tokens) else ","
    if negated:
        if operator != ",":
            raise _Malformed(f"'!{key}' takes no operator or value")
        return Requirement(key, "DoesNotExist"), i
    if operator == ",":
        return Requirement(key, "Exists"), i
    if operator in ("in", "notin"):
        values, i = _values(tokens, i + 1, key=key, operator=operator)
        return Requirement(key, _OPERATORS[operator], values), i
    if operator not in ("=", "==", "!=", "<", ">"):
        raise _Malformed(f"{operator!r} after key {key!r} is no operator")
    value = tokens[i + 1] if i + 1 < len(tokens) else ""
    if value in _PUNCTUATION or value == ")":
        raise _Malformed(f"'{key}{operator}' is followed by {value!r}, not a value")
    value = "" if value == "," else value
    after = i + 2 if value else i + 1
    if operator in ("<", ">"):
        if not value.lstrip("-").isdigit():
            raise _Malformed(f"'{key}{operator}' needs a whole number, got {value!r}")
        return Requirement(key, "Gt" if operator == ">" else "Lt", (value,)), after
    _check_value(value)
    return Requirement(key, _OPERATORS[operator], (value,)), after


def parse_selector(written: str) -> tuple[LabelSelector, str]:
    """``written`` in kubectl's syntax as a ``LabelSelector`` (the empty one, which matches
    everything, for a blank string), and "" or what is wrong with it."""
    tokens = _tokens(written)
    requirements: list[Requirement] = []
    i = 0
    try:
        while i < len(tokens):
            requirement, i = _requirement(tokens, i)
            requirements.append(requirement)
            if i < len(tokens):
                if tokens[i] != ",":
                    raise _Malformed(f"{tokens[i]!r} where a ',' was expected")
                i += 1
                if i == len(tokens):
                    raise _Malformed("the selector ends with ','")
    except _Malformed as malformed:
        return LabelSelector(), f"{malformed}; write {SELECTOR_SYNTAX}"
    return LabelSelector(match_expressions=tuple(requirements)), ""
