"""What ``bench.run`` found, typed: the settings of a run, its schedulers, and its rounds, each
round the bind ceilings it measured and every scheduler's run of every workload.

``bench.run`` builds a ``Results`` and writes ``to_json()``; its page, ``bench.beside`` (which
puts runs made apart in one table) and ``bench.curve`` read one back with
``Results.read``. A run's figures stay a mapping from figure names to values: a workload
reports the figures it measures (a backlog pods/s, a latency run percentiles, a contention
run whole gangs), and the names are the JSON's, which the pages read by name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Run:
    """One scheduler's run of one workload in one round: its figures, or the error that
    ended it with how far it got."""

    figures: Mapping[str, Any]

    @property
    def error(self) -> str | None:
        return self.figures.get("error")

    @property
    def failed(self) -> bool:
        return self.error is not None

    def number(self, key: str) -> float | None:
        """``key`` as a number, if the run finished and reported it."""
        value = self.figures.get(key)
        if self.failed or isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)

    @property
    def loud(self) -> bool:
        """Still writing at the cap after its last bind: no figure ends at its last write."""
        return self.figures.get("quiet") is False

    @property
    def requests(self) -> Mapping[str, int] | None:
        """The API requests it made, by verb and resource, if they were counted."""
        if self.failed or "api_requests" not in self.figures:
            return None
        return self.figures["api_requests"]["by_verb_and_resource"]

    def got(self) -> str:
        """A failed run's cell: its error, and how far it got if that is known."""
        f = self.figures
        got = []
        if "pods_bound" in f:
            got.append(f"{f['pods_bound']} of {f['pods']} pods bound")
        if "start_to_first_bind_seconds" in f:
            got.append(f"first bind after {f['start_to_first_bind_seconds']} s")
        if "cpu_seconds" in f:
            got.append(f"{f['cpu_seconds']} CPU s, peak RSS {f['peak_rss_mib']} MiB")
        return "; ".join([str(self.error), *got])


@dataclass(frozen=True)
class Round:
    """One round: the schedulers in the order they ran, the bind ceilings measured before
    them (``bind_ceiling``, and ``bind_ceiling_watched`` with the bench's watch running),
    and every run, by workload then scheduler."""

    order: tuple[str, ...] = ()
    ceilings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    workloads: Mapping[str, Mapping[str, Run]] = field(default_factory=dict)

    def run(self, workload: str, scheduler: str) -> Run | None:
        return self.workloads.get(workload, {}).get(scheduler)

    def ceiling(self, name: str, key: str) -> float | None:
        value = self.ceilings.get(name, {}).get(key)
        return float(value) if isinstance(value, int | float) else None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Round:
        return cls(
            order=tuple(data.get("order", ())),
            ceilings={k: v for k, v in data.items() if k.startswith("bind_ceiling")},
            workloads={
                workload: {scheduler: Run(figures) for scheduler, figures in runs.items()}
                for workload, runs in data.get("workloads", {}).items()
            },
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"order": list(self.order), **self.ceilings}
        out["workloads"] = {
            workload: {scheduler: dict(run.figures) for scheduler, run in runs.items()}
            for workload, runs in self.workloads.items()
        }
        return out


@dataclass(frozen=True)
class Results:
    """A run of the bench: what every workload shared (``settings``: the machine, the control
    plane, nodes, client limits, the quiet window...), the schedulers by key (each its
    ``label``, ``version`` and settings), and the rounds."""

    settings: Mapping[str, Any]
    schedulers: Mapping[str, Mapping[str, Any]]
    rounds: tuple[Round, ...] = ()

    def setting(self, key: str, default: Any = None) -> Any:
        return self.settings.get(key, default)

    def label(self, scheduler: str) -> str:
        return self.schedulers[scheduler]["label"]

    def ran(self, workload: str) -> list[str]:
        """The schedulers that ran ``workload`` in some round, in the run's order."""
        return [
            key
            for key in self.schedulers
            if any(one.run(workload, key) is not None for one in self.rounds)
        ]

    def runs(self, workload: str, scheduler: str) -> list[Run]:
        """``scheduler``'s runs of ``workload``, a round each where it ran."""
        return [r for one in self.rounds if (r := one.run(workload, scheduler)) is not None]

    def figures(self, workload: str, scheduler: str, key: str) -> list[float]:
        """``key`` of ``scheduler`` in every round it finished ``workload`` and reported it."""
        return [
            value for r in self.runs(workload, scheduler) if (value := r.number(key)) is not None
        ]

    def failure(self, workload: str, scheduler: str) -> str | None:
        """The first failed round of ``scheduler`` in ``workload``, as its cell says it."""
        for number, one in enumerate(self.rounds, start=1):
            r = one.run(workload, scheduler)
            if r is not None and r.failed:
                where = f"round {number}: " if len(self.rounds) > 1 else ""
                return f"failed ({where}{r.got()})"
        return None

    def loud(self, workload: str, scheduler: str) -> int:
        """In how many rounds ``scheduler`` was still writing at the cap after its last bind."""
        return sum(1 for r in self.runs(workload, scheduler) if r.loud)

    def with_round(self, one: Round) -> Results:
        return replace(self, rounds=(*self.rounds, one))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Results:
        """A results file as ``bench.run`` wrote it (one without rounds, from before rounds
        were kept, is its own one round)."""
        rounds = data.get("rounds") or [data]
        of_round = {"order", "workloads"} if not data.get("rounds") else set()
        return cls(
            settings={
                k: v
                for k, v in data.items()
                if k not in {"schedulers", "rounds", *of_round}
                and not (of_round and k.startswith("bind_ceiling"))
            },
            schedulers=dict(data.get("schedulers", {})),
            rounds=tuple(Round.from_json(one) for one in rounds),
        )

    @classmethod
    def read(cls, path: Path) -> Results:
        return cls.from_json(json.loads(path.read_text()))

    def to_json(self) -> dict[str, Any]:
        return {
            **self.settings,
            "schedulers": {k: dict(v) for k, v in self.schedulers.items()},
            "rounds": [one.to_json() for one in self.rounds],
        }
