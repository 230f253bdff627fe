"""Kubernetes quantities ("200Mi", "1.5", "100m") as exact decimals, by the kubernetes
client's own ``parse_quantity``.

The client's module needs only ``decimal``, but ``import kubernetes.utils.quantity`` runs
the package's ``__init__``, which imports the whole client: about a fifth of a second of the
scheduler's start-up, before anything is listed. So the module is loaded from its file on
its own, the library's code as it is; nothing of the client comes with it.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from decimal import Decimal
from types import ModuleType

from scheduler.model.resources import CPU


def _client_quantity_module() -> ModuleType:
    package = importlib.util.find_spec("kubernetes")  # finds the package, runs nothing
    if package is None or not package.submodule_search_locations:
        raise ImportError(
            "the kubernetes client package is not installed; install the project with "
            "`make setup` (pip install -e .)"
        )
    path = f"{next(iter(package.submodule_search_locations))}/utils/quantity.py"
    spec = importlib.util.spec_from_file_location("_kubernetes_quantity", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the kubernetes client's quantity parser from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_parse = _client_quantity_module().parse_quantity


def parse_quantity(quantity: object) -> Decimal:
    """The client's ``parse_quantity``: a decimal number, then a binary suffix (Ki, Mi, Gi,
    Ti, Pi, Ei) or a decimal one (n, u, m, k, M, G, T, P, E) or none. Raises ValueError for
    an unknown suffix or a malformed number."""
    return _parse(quantity)


# Kubernetes keeps quantities in int64 (kube-scheduler: cpu in millicores, the rest in base
# units); nothing larger can be requested or offered.
MAX_AMOUNT = 2**63 - 1
QUANTITY_RULE = (
    "a quantity such as 500m, 2 or 8Gi, from 0 up to 2^63-1 base units (cpu: millicores)"
)


def quantity(name: str, raw: object) -> int:
    """A quantity in our integer base units: cpu in millicores, the rest rounded up.

    Raises ValueError for anything else, QUANTITY_RULE says what is allowed. Beyond what
    ``parse_quantity`` refuses, that is: a negative amount, infinity and NaN (``Decimal``
    reads "Infinity" and "sNaN"), and amounts beyond int64, which would otherwise become
    integers of a million digits ("1e999999") or raise ``decimal.Overflow`` ("1e999999999"
    in millicores). JSON ``true`` is not the quantity 1.
    """
    if isinstance(raw, str):
        return _quantity_of_text(name, raw)
    return _quantity(name, raw)


@functools.lru_cache(maxsize=4096)
def _quantity_of_text(name: str, raw: str) -> int:
    """Every pod event parses its requests again, and they are nearly always the same few
    strings ("1", "500m", "8Gi"): a decimal parse each time was a quarter of the pod
    codec's time. Bounded, so hostile strings cannot grow it; errors are not kept."""
    return _quantity(name, raw)


def _quantity(name: str, raw: object) -> int:
    if isinstance(raw, bool):
        raise ValueError(f"{raw!r} is not a quantity")
    try:
        value: Decimal = parse_quantity(raw)
        if name == CPU:
            value *= 1000
    except ArithmeticError as error:  # decimal.Overflow, InvalidOperation (sNaN)
        raise ValueError(f"{raw!r} is not a quantity") from error
    if not value.is_finite() or value < 0 or value > MAX_AMOUNT:
        raise ValueError(f"{raw!r} is not {QUANTITY_RULE}")
    return math.ceil(value)
