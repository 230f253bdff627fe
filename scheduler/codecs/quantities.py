"""Kubernetes quantities ("200Mi", "1.5", "100m") as exact decimals.

The rules of the kubernetes client's ``kubernetes.utils.quantity.parse_quantity``, which
this replaces: importing it imports the whole client package (about a fifth of a second
of the scheduler's start-up, before anything is listed).
"""

from __future__ import annotations

from decimal import Decimal, DecimalException, InvalidOperation

_EXPONENTS = {"n": -3, "u": -2, "m": -1, "K": 1, "k": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
_BINARY_PREFIXES = "KMGTPE"


def parse_quantity(quantity: object) -> Decimal:
    """A quantity in canonical form: a decimal number, then a binary suffix (Ki, Mi, Gi,
    Ti, Pi, Ei) or a decimal one (n, u, m, k, M, G, T, P, E) or none. Numbers are taken as
    they are. Raises ValueError for an unknown suffix or a malformed number."""
    if isinstance(quantity, int | float | Decimal):
        return Decimal(quantity)
    text = str(quantity)
    number, suffix = text, ""
    if len(text) >= 2 and text[-1] == "i":
        if text[-2] in _EXPONENTS:
            number, suffix = text[:-2], text[-2:]
    elif text and text[-1] in _EXPONENTS:
        number, suffix = text[:-1], text[-1:]
    try:
        value = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"Invalid number format: {number}") from None
    if not suffix:
        return value
    if suffix.endswith("i"):
        if suffix[0] not in _BINARY_PREFIXES:  # "ki", "mi", "ni", "ui" are no binary suffix
            raise ValueError(f"{text} has unknown suffix")
        base = 1024
    else:
        base = 1000
    try:
        return value * (base ** Decimal(_EXPONENTS[suffix[0]]))
    except DecimalException as error:
        raise ValueError(f"Invalid quantity: {text}") from error
