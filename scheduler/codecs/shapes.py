"""The JSON shapes the codecs read, enforced: a value of the wrong JSON type counts as absent.

The API server checks the built-in kinds (pods, nodes, ConfigMaps, PriorityClasses) against
their schemas, and PodGroups against the CRD's, so for watched objects these guards almost
never fire. They are here because what the codecs let through reaches the core, which
compares, sorts, adds and formats what it reads: one pod whose name is a number, whose
priority is a string or whose labels are a list would crash every scheduling pass, not just
its own, and the loop would retry that pass forever. A wrong-typed value is therefore
treated like a missing one, the way the codecs already treat a missing one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

_EMPTY: Mapping[str, Any] = {}


# Every watch event of a pod goes through these a few hundred times: a decoded JSON object
# is a dict, and ``type(x) is dict`` is checked first because ``isinstance(x, Mapping)``
# goes through the ABC machinery (it was a sixth of the pod codec's time).


MAX_COUNT = 2**31 - 1  # an int32 count, as the API's


def loads(raw: str) -> tuple[Any, str]:
    """``json.loads`` of an annotation or ConfigMap value, and why it failed ("" if it did
    not). Besides JSONDecodeError, json.loads raises ValueError for an integer of more than
    4,300 digits and RecursionError for arrays or objects nested deeper than the
    interpreter's stack ("[[[[..."): a hostile annotation must be an error, not a crash."""
    try:
        return json.loads(raw), ""
    except json.JSONDecodeError as error:
        return None, error.msg
    except ValueError:  # the only other one json.loads raises
        return None, "a number in it has more than 4,300 digits"
    except RecursionError:
        return None, "nested too deeply"


def obj(raw: object) -> Mapping[str, Any]:
    """A JSON object, or an empty one for anything else (null included)."""
    if type(raw) is dict:
        return raw
    return raw if isinstance(raw, Mapping) else _EMPTY


def listed(raw: object) -> Sequence[Any]:
    """A JSON list, or an empty one for anything else (a string is not a list of letters).
    Read only: a list is returned as it is."""
    return raw if isinstance(raw, list | tuple) else ()


def objs(raw: object) -> list[Mapping[str, Any]]:
    """The JSON objects in a JSON list; other entries, or a value that is not a list, are
    left out."""
    if raw is None:  # an absent field: most of the lists a pod may hold, it does not
        return []
    return [e for e in listed(raw) if type(e) is dict or isinstance(e, Mapping)]


def text(raw: object, default: str = "") -> str:
    """A JSON string, or ``default`` for anything else (null included)."""
    return raw if isinstance(raw, str) else default


def texts(raw: object) -> dict[str, str]:
    """A map of strings (labels, annotations, a nodeSelector, ConfigMap data): the entries
    whose key and value are both strings."""
    return {k: v for k, v in obj(raw).items() if isinstance(k, str) and isinstance(v, str)}


def whole(raw: object) -> int | None:
    """A JSON integer (not a boolean, not a float), or None."""
    return raw if isinstance(raw, int) and not isinstance(raw, bool) else None


def integer(raw: object, default: int = 0) -> int:
    """A count (the API server has checked it is an integer), else ``default``. ``int()``
    raises OverflowError for an infinite float, besides TypeError and ValueError."""
    if isinstance(raw, bool):
        return default
    try:
        return int(raw)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return default
