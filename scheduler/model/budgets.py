"""PodDisruptionBudgets as preemption reads them: kube-scheduler's DefaultPreemption prefers
victims whose eviction breaks no budget, and keeps (reprieves) those that would first."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.model.pods import LabelSelector


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """A PodDisruptionBudget: how many more of the pods it selects may be disrupted now
    (``status.disruptionsAllowed``, kept by the disruption controller), and the pods already
    counted as disrupted (``status.disruptedPods``, by name), which cost it nothing more."""

    namespace: str
    name: str
    # None (no selector) and the empty selector both select nothing here, as in
    # kube-scheduler's preemption ("a PDB with a nil or empty selector matches nothing").
    selector: LabelSelector | None
    disruptions_allowed: int = 0
    disrupted: frozenset[str] = frozenset()
