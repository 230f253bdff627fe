"""The latest forward play the loop's forecaster made, kept for the passes' statuses and the
reserve action, and which gangs a new one changed what is said of."""

from __future__ import annotations

from scheduler.model.forecasts import Eta, Forecast, shown_minute
from scheduler.model.pods import GangKey


class Forecasts:
    def __init__(self) -> None:
        self.latest: Forecast | None = None

    def keep(self, found: Forecast) -> list[GangKey]:
        """Keep ``found``; the gangs whose estimate it changed as a status says it (to the
        minute), to be looked at again. The others are not: a play every 30 s must not
        wake every waiting gang."""
        before = self.latest.etas if self.latest is not None else {}
        self.latest = found
        return [key for key, eta in found.etas.items() if _said(before.get(key)) != _said(eta)]

    def forget(self) -> None:
        """Nothing waits: what the last play said is of gangs placed since."""
        self.latest = None


def _said(eta: Eta | None) -> tuple | None:
    if eta is None:
        return None
    minute = (shown_minute(eta.p50), shown_minute(eta.p90)) if eta.p50 is not None else ()
    return (eta.state, minute, eta.behind)
