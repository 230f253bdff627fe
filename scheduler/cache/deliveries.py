"""What the watches have delivered, and when: for the first sync and for re-lists.

Every delivery (an object, or its deletion) is counted on one counter. A re-list (an
informer's LIST after its watch was away) is a consistent read, newer than anything
delivered before it began: it takes in what no watch delivered since, and removes only what
it misses *and* no watch delivered since. So while a LIST of a kind is in flight, each
delivery of that kind is stamped with the count; a stamp older than every LIST in flight
tells none of them anything, and with none in flight the kind keeps no stamps at all (kept
for good, the stamps of deleted pods grew by one per pod the cluster ever ran). Until the
first sync is over, every (kind, key) delivered is kept, so the loop can wait for what a
fresh LIST shows.
"""

from __future__ import annotations

from collections.abc import Collection


class Deliveries:
    def __init__(self) -> None:
        self._delivered = 0
        self._stamps: dict[str, dict[str, int]] = {}
        # The LISTs in flight, by kind: the count each began at.
        self._listing: dict[str, list[int]] = {}
        # Until the first pass, every object a watch delivered, relevant or not.
        self._seen: set[tuple[str, str]] | None = set()

    def seen(self, kind: str, key: str) -> None:
        """An object of ``kind`` was delivered."""
        self._delivered += 1
        if kind in self._listing:
            self._stamps.setdefault(kind, {})[key] = self._delivered
        if self._seen is not None:
            self._seen.add((kind, key))

    def gone(self, kind: str, key: str) -> None:
        """A deletion is a delivery too: a LIST begun before it must not bring the object
        back."""
        self._delivered += 1
        if kind in self._listing:
            self._stamps.setdefault(kind, {})[key] = self._delivered

    @property
    def delivered(self) -> int:
        """How many objects the watches have delivered so far (a point in their stream)."""
        return self._delivered

    def vanished(
        self, kind: str, held: Collection[str], listed: set[str], *, since: int
    ) -> list[str]:
        """Keys of ``held`` that a LIST begun at ``since`` did not show and no watch
        delivered after it: objects deleted while no watch was there to say so."""
        stamps = self._stamps.get(kind, {})
        return sorted(k for k in held if k not in listed and stamps.get(k, 0) <= since)

    def stale(self, kind: str, key: str, *, since: int) -> bool:
        """Whether a LIST begun at ``since`` knows ``key`` better than the cache does: no
        watch delivered it, nor its deletion, since. What a watch delivered after may be
        newer."""
        return self._stamps.get(kind, {}).get(key, 0) <= since

    def listing(self, kind: str) -> int:
        """A LIST of ``kind`` begins: the count it begins at (its ``since``). Every LIST
        begun ends with ``listed``, whether it got through or not."""
        self._listing.setdefault(kind, []).append(self._delivered)
        return self._delivered

    def listed(self, kind: str, *, since: int) -> None:
        """The LIST of ``kind`` begun at ``since`` is over: forget the stamps no LIST still
        in flight needs (all of the kind's, once none is)."""
        sinces = self._listing.get(kind, [])
        if since in sinces:
            sinces.remove(since)
        if not sinces:
            self._listing.pop(kind, None)
            self._stamps.pop(kind, None)
            return
        oldest = min(sinces)
        stamps = self._stamps.get(kind, {})
        for key in [k for k, stamp in stamps.items() if stamp <= oldest]:
            del stamps[key]

    def stamps(self) -> int:
        """How many stamps are kept (for tests: none once no LIST is in flight)."""
        return sum(len(stamps) for stamps in self._stamps.values())

    def unseen(self, expected: set[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of ``expected`` no watch has delivered yet."""
        return expected - (self._seen or set())

    def stop_tracking(self) -> None:
        self._seen = None

    @property
    def synced(self) -> bool:
        """Whether the first sync is over (watches delivered all a LIST showed)."""
        return self._seen is None
