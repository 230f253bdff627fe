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


# Go's time.Duration is int64 nanoseconds: Koordinator cannot wait longer (about 292 years).
MAX_DURATION_SECONDS = (2**63 - 1) / 1e9


def parse_time(value: object) -> float | None:
    """RFC 3339 (``2026-11-21T10:00:00Z``) to seconds since the epoch; None if absent or bad.

    Bad includes what is not a string, and a time that exists only thanks to its offset
    (``9999-12-31T23:59:59-23:59`` is in the year 10000 in UTC): ``format_time`` could not
    write it back, and the pass writes first attempts back.
    """
    if not value or not isinstance(value, str):
        return None
    try:
        seconds = dt.datetime.fromisoformat(value).timestamp()
        dt.datetime.fromtimestamp(seconds, dt.UTC)  # representable in UTC
    except (ValueError, OverflowError, OSError):  # OverflowError, OSError: the platform's
        return None  # time functions, for naive times at the ends of the range
    return seconds


def format_time(seconds: float) -> str:
    """Seconds since the epoch to RFC 3339 in UTC, as metav1.Time serialises."""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_duration(value: str) -> float:
    """A Go duration (``600s``, ``10m``, ``1h30m``) or a bare number of seconds.

    Raises ValueError for anything else, a negative duration, or one longer than Go's
    (MAX_DURATION_SECONDS): ``float`` reads "nan", "inf" and "1e309", and a timeout that is
    not a finite number would never fall due, or wake the loop at a NaN time.
    """
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not 0 <= seconds <= MAX_DURATION_SECONDS:  # False for nan too
            raise ValueError(value)
        return seconds
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            raise ValueError(value)
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos == 0 or pos != len(text) or not total <= MAX_DURATION_SECONDS:
        raise ValueError(value)
    return total


def age(seconds: float) -> str:
    """As kubectl prints an age (apimachinery's duration.HumanDuration): 45s, 3m12s, 25m,
    5h2m, 20h, 3d4h, 30d, 2y10d."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 120:
        return f"{max(s, 0)}s"
    minutes, hours = s // 60, s // 3600
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    if hours < 24 * 365 * 8:
        return f"{years}y{days % 365}d" if days % 365 else f"{years}y"
    return f"{years}y"
