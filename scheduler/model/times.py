"""Timestamps and durations as Kubernetes and Go write them."""

from __future__ import annotations

import datetime as dt
import re

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_time(value: str | None) -> float | None:
    """RFC 3339 (``2026-11-21T10:00:00Z``) to seconds since the epoch; None if absent or bad."""
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def format_time(seconds: float) -> str:
    """Seconds since the epoch to RFC 3339 in UTC, as metav1.Time serialises."""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_duration(value: str) -> float:
    """A Go duration (``600s``, ``10m``, ``1h30m``) or a bare number of seconds.

    Raises ValueError for anything else, or a negative duration.
    """
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if seconds < 0:
            raise ValueError(value)
        return seconds
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            raise ValueError(value)
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos == 0 or pos != len(text):
        raise ValueError(value)
    return total
