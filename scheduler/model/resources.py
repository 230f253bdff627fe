"""Amounts of resources, in integer base units, and the arithmetic a scheduler needs.

cpu is counted in millicores, memory and storage in bytes, everything else (pods,
nvidia.com/gpu, other extended resources) in whole units. Integers keep the bookkeeping exact:
a node is never over-committed by a rounding error.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from dataclasses import dataclass, field

CPU = "cpu"
MEMORY = "memory"
GPU = "nvidia.com/gpu"  # the device plugin's extended resource, what fragmentation measures
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"
_BYTE_RESOURCES = (MEMORY, EPHEMERAL_STORAGE)


@dataclass(frozen=True, slots=True)
class Resources(Mapping[str, int]):
    """An immutable mapping of resource name to amount; absent names are zero."""

    amounts: Mapping[str, int] = field(default_factory=dict)
    # Worked out once: Resources key the node finder's classes and the queue's shapes.
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        amounts = {k: v for k, v in self.amounts.items() if v}
        object.__setattr__(self, "amounts", amounts)
        object.__setattr__(self, "_hash", hash(frozenset(amounts.items())))

    def __getitem__(self, name: str) -> int:
        return self.amounts[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.amounts)

    def __len__(self) -> int:
        return len(self.amounts)

    # The dict's own, not the Mapping mixins' (Python, through __iter__ and __getitem__):
    # every pass reads amounts by these thousands of times a node.

    def __contains__(self, name: object) -> bool:
        return name in self.amounts

    def get(self, name: str, default: int | None = None) -> int | None:  # type: ignore[override]
        return self.amounts.get(name, default)

    def keys(self) -> KeysView[str]:
        return self.amounts.keys()

    def values(self) -> ValuesView[int]:
        return self.amounts.values()

    def items(self) -> ItemsView[str, int]:
        return self.amounts.items()

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Resources):
            return self.amounts == other.amounts
        if isinstance(other, Mapping):
            return self.amounts == {k: v for k, v in other.items() if v}
        return NotImplemented

    def __repr__(self) -> str:
        return f"Resources({self.amounts!r})"

    def __add__(self, other: Mapping[str, int]) -> Resources:
        total = dict(self.amounts)
        for name, amount in other.items():
            total[name] = total.get(name, 0) + amount
        return Resources(total)

    def __sub__(self, other: Mapping[str, int]) -> Resources:
        rest = dict(self.amounts)
        for name, amount in other.items():
            rest[name] = rest.get(name, 0) - amount
        return Resources(rest)

    def without(self, names: Iterable[str]) -> Resources:
        """These resources but ``names``."""
        dropped = set(names)
        return Resources({n: a for n, a in self.amounts.items() if n not in dropped})

    def shortfalls(self, free: Mapping[str, int]) -> tuple[str, ...]:
        """The names whose request exceeds what ``free`` offers, in name order."""
        return tuple(sorted(n for n, a in self.amounts.items() if a > free.get(n, 0)))

    @classmethod
    def total(cls, many: Iterable[Mapping[str, int]]) -> Resources:
        summed: dict[str, int] = {}
        for one in many:
            for name, amount in one.items():
                summed[name] = summed.get(name, 0) + amount
        return cls(summed)


def format_amount(name: str, amount: int) -> str:
    """An amount as a person would write it in a manifest: 1500m, 8Gi, 4."""
    if name == CPU:
        return f"{amount // 1000}" if amount % 1000 == 0 else f"{amount}m"
    if name in _BYTE_RESOURCES or name.startswith("hugepages-"):
        for suffix, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if amount and amount % size == 0:
                return f"{amount // size}{suffix}"
    return str(amount)


def describe(resources: Mapping[str, int]) -> str:
    """``{cpu: 2, nvidia.com/gpu: 8}``: for messages."""
    inner = ", ".join(f"{n}: {format_amount(n, a)}" for n, a in sorted(resources.items()))
    return "{" + inner + "}"
