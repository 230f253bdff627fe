"""Why a pod or gang was (not) placed, and whether trying again can help.

Modelled on kube-scheduler's framework.Status: a code plus reasons that end up verbatim in a
FailedScheduling event, never a bare False.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Code(Enum):
    SUCCESS = "Success"
    # Does not fit now; a change in the cluster (pods finishing, nodes added) may help.
    UNSCHEDULABLE = "Unschedulable"
    # Cannot fit whatever the cluster does: the spec itself must change.
    UNRESOLVABLE = "UnschedulableAndUnresolvable"
    # Not tried yet: something it needs is missing (its PodGroup, more members).
    WAIT = "Wait"


@dataclass(frozen=True, slots=True)
class Status:
    code: Code
    reasons: tuple[str, ...] = ()

    @classmethod
    def success(cls) -> Status:
        return _SUCCESS

    @classmethod
    def unschedulable(cls, *reasons: str) -> Status:
        return cls(Code.UNSCHEDULABLE, reasons)

    @classmethod
    def unresolvable(cls, *reasons: str) -> Status:
        return cls(Code.UNRESOLVABLE, reasons)

    @classmethod
    def wait(cls, *reasons: str) -> Status:
        return cls(Code.WAIT, reasons)

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def retry_can_help(self) -> bool:
        return self.code is not Code.UNRESOLVABLE

    @property
    def message(self) -> str:
        return "; ".join(self.reasons)


_SUCCESS = Status(Code.SUCCESS)
