"""Kubernetes quantities ("200Mi", "1.5", "100m") as exact decimals, by the kubernetes
client's own ``parse_quantity``.

The client's module needs only ``decimal``, but ``import kubernetes.utils.quantity`` runs
the package's ``__init__``, which imports the whole client: about a fifth of a second of the
scheduler's start-up, before anything is listed. So the module is loaded from its file on
its own, the library's code as it is; nothing of the client comes with it.
"""

from __future__ import annotations

import importlib.util
from decimal import Decimal
from types import ModuleType


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
