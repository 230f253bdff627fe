"""The forward play: when each waiting gang is expected to start, if the gangs that run end
when they are expected to and nothing that sorts ahead of it arrives.

From a snapshot, the real pass (``schedule``, with the live settings and actions) is played
again and again on a world that only the play changes: a bind starts a gang's pods, which
end once its expected run time (``durations``) has passed; a victim goes at once; pods with
no known end (other schedulers' pods, gangs whose run time is unknown) never end. The clock
jumps from one end (or a time a pass asked to be woken at) to the next, rounded up to
``resolution`` as Slurm's backfill rounds its ends (``bf_resolution``), so ends close
together are one virtual pass. A gang that pass places is said to start at the last of
those ends that freed its nodes, not at the rounded time, and its own run is counted from
there: the live scheduler binds within a second of an end, and a start late by half a step
on average would add up along a line of runs. Two plays: every run at its median, then at its 90th
percentile ("if runs go badly": not a quantile of the start, which is a max of sums).

Pure and deterministic, as the pass: the same snapshot gives the same forecast. Backoffs are
zero in the play and parked gangs are never flushed: only ends change the world, and the
nodes they change wake exactly the gangs they could help (``session.parking``), as in the
live loop. Timeouts stay on: a gang whose room comes after its timeout times out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from scheduler.core.durations import expected_duration, history
from scheduler.core.gangs import resolve
from scheduler.core.placing import Ledger, NodeFinder
from scheduler.core.scheduling import schedule
from scheduler.core.session.outcomes import pending
from scheduler.model.config import Config
from scheduler.model.decisions import Result
from scheduler.model.forecasts import Duration, Eta, EtaState, Forecast
from scheduler.model.gangs import Gang
from scheduler.model.nodes import Node, NodeInfo
from scheduler.model.pods import GangKey, Pod, PodRef, gang_key_of
from scheduler.model.snapshot import GangState, Snapshot

DAY = 86_400.0
# How many gangs a waiting gang's ETA names as the ones it waits behind.
BEHIND = 3
# How many gangs left waiting at the play's end are tried on empty nodes, to tell one that
# never fits from one behind room that never frees.
EMPTY_CHECKS = 100


def forecast(
    snapshot: Snapshot,
    *,
    now: float,
    config: Config,
    window: float = DAY,
    resolution: float = 60.0,
    max_passes: int = 1_000,
    cancelled: Callable[[], bool] = lambda: False,
) -> Forecast:
    """Each waiting gang's expected start from ``snapshot`` (which must hold every pod of
    ours, parked gangs' included): played up to ``window`` seconds ahead and at most
    ``max_passes`` virtual passes per play. ``cancelled`` is asked between virtual passes:
    once it says yes, ``PlayCancelled`` (a scheduler shutting down does not wait for a
    play to end)."""
    if not (resolution > 0 and math.isfinite(resolution)):
        raise ValueError(f"resolution must be a positive number of seconds, got {resolution!r}")
    gangs = resolve(snapshot, config).gangs
    runs = history(gangs.values())
    durations = {key: expected_duration(gang, runs=runs) for key, gang in gangs.items()}
    settings = _Settings(
        cancelled=cancelled,
        now=now,
        config=replace(
            config,
            initial_backoff_seconds=0.0,
            max_backoff_seconds=0.0,
            unschedulable_flush_seconds=math.inf,
        ),
        window=window,
        resolution=resolution,
        max_passes=max_passes,
    )
    median = _Play(snapshot, gangs, durations, settings, quantile=0.5).run()
    bad = _Play(snapshot, gangs, durations, settings, quantile=0.9).run()
    etas = {
        key: replace(eta, p90=bad.etas[key].p50 if key in bad.etas else None)
        for key, eta in median.etas.items()
    }
    return Forecast(at=now, etas=etas, passes=median.passes + bad.passes, horizon=median.horizon)


class PlayCancelled(Exception):
    """The play was told to stop (``forecast``'s ``cancelled``)."""


@dataclass(frozen=True, slots=True)
class _Settings:
    cancelled: Callable[[], bool]
    now: float
    config: Config
    window: float
    resolution: float
    max_passes: int


def _fits_empty(nodes: Mapping[str, Node], gang: Gang) -> bool:
    """Whether the gang's waiting members fit on ``nodes`` emptied of every pod (as the
    hold-head action finds a head gang's target)."""
    empty = Ledger.over(nodes, {})
    finder = NodeFinder(nodes, empty, scoring="spread")
    for pod in pending(gang):
        node = finder.find(replace(pod, scoring="spread"), empty)
        if node is None:
            return False
        empty.place(pod, node)
    return True


def waiting_gangs(gangs: Mapping[GangKey, Gang]) -> list[GangKey]:
    """The gangs a forecast is for: members waiting, none of them running yet."""
    return sorted(
        key
        for key, gang in gangs.items()
        if pending(gang) and not any(p.bound and p.alive for p in gang.members)
    )


def _running(gang: Gang) -> list[Pod]:
    return [p for p in gang.members if p.bound and p.alive]


@dataclass
class _Outcome:
    """What the play found so far of one waiting gang."""

    state: EtaState | None = None
    at: float | None = None
    behind: tuple[GangKey, ...] = ()
    reason: str = ""
    tried: bool = False  # a pass of the play tried to place it: it is ready
    placement: dict[PodRef, str] = field(default_factory=dict)


@dataclass
class _Play:
    """One play: the world as the passes leave it, and when what runs ends."""

    base: Snapshot
    gangs: Mapping[GangKey, Gang]
    durations: Mapping[GangKey, Duration]
    settings: _Settings
    quantile: float
    pods: dict[str, Pod] = field(init=False)
    infos: dict[str, NodeInfo] = field(init=False)
    memory: dict[GangKey, GangState] = field(init=False)
    generation: int = field(init=False)
    ends: dict[GangKey, float] = field(init=False, default_factory=dict)
    # Gangs whose run has no known end, holding room: what a gang stuck behind them waits on.
    endless: set[GangKey] = field(init=False, default_factory=set)
    # Per node, (when, gang) of the runs that ended there in the play.
    freed: dict[str, list[tuple[float, GangKey]]] = field(init=False, default_factory=dict)
    leaving: set[str] = field(init=False, default_factory=set)
    by_gang: dict[GangKey, list[str]] = field(init=False, default_factory=dict)
    # The ends played in the last step, each at its own time (``_start``).
    stepped: list[float] = field(init=False, default_factory=list)
    # Whether pods of other schedulers hold room: they never end in the play.
    others: bool = field(init=False, default=False)
    passes: int = 0
    horizon: float = 0.0

    def __post_init__(self) -> None:
        base = self.base
        self.pods = {p.ref.uid: p for p in base.pods}
        ours = self.settings.config.scheduler_names
        for pod in base.pods:
            if pod.scheduler_name in ours:
                self.by_gang.setdefault(gang_key_of(pod), []).append(pod.ref.uid)
        self.infos = dict(base.infos())
        # Each waiting gang is tried afresh in the play's first pass, whatever its backoff or
        # parking: a gang never tried in the play is one that is not ready.
        self.memory = {
            key: replace(state, parked=None, retry_at=0.0) for key, state in base.memory.items()
        }
        self.generation = base.generation
        self.others = any(
            p.scheduler_name not in ours for info in self.infos.values() for p in info.pods
        )
        self.leaving = set(base.leaving)
        now = self.settings.now
        for key, gang in self.gangs.items():
            running = _running(gang)
            if not running:
                continue
            starts = [p.started for p in running if p.started is not None]
            # No start known (a pod the kubelet has not reported on): counted from now, the
            # later of the two.
            start = min(starts) if starts else now
            left = self._remaining(self.durations[key], elapsed=max(now - start, 0.0))
            if left is None:
                self.endless.add(key)
            else:
                self.ends[key] = now + left

    def _remaining(self, duration: Duration, *, elapsed: float) -> float | None:
        """How much longer a run that has gone on ``elapsed`` seconds lasts: its expected
        time less what passed; past its median, what is left to its 90th percentile; past
        that or past its bound, any moment (one resolution)."""
        if duration.p50 is None:
            return None
        tick = self.settings.resolution
        p90 = duration.p90 if duration.p90 is not None else duration.p50
        marks = (p90,) if self.quantile > 0.5 else (duration.p50, p90)
        left = next((mark - elapsed for mark in marks if mark > elapsed), tick)
        if duration.bound is not None:
            left = min(left, duration.bound - elapsed)
        return max(left, tick)

    # -- the world --------------------------------------------------------------------------

    def _touch(self, node: str, pods: Iterable[Pod]) -> None:
        self.generation += 1
        self.infos[node] = NodeInfo.of(
            node, self.base.nodes.get(node), tuple(pods), generation=self.generation
        )

    def _place(self, uid: str, node: str, *, at: float) -> None:
        pod = self.pods.get(uid)
        if pod is None or pod.bound:
            return
        bound = replace(
            pod,
            node_name=node,
            phase="Running",
            bound_by=self.settings.config.scheduler_name,
            started=at,
        )
        self.pods[uid] = bound
        info = self.infos.get(node)
        self._touch(node, (*(info.pods if info is not None else ()), bound))

    def _remove(self, uids: set[str]) -> set[str]:
        """The pods ``uids`` gone; the nodes they freed."""
        by_node: dict[str, set[str]] = {}
        theirs = set()
        for uid in uids:
            pod = self.pods.pop(uid, None)
            if pod is None:
                theirs.add(uid)
            elif pod.holds_resources:
                by_node.setdefault(pod.node_name, set()).add(uid)
        if theirs:  # another scheduler's victims, held in the node infos only
            for node, info in self.infos.items():
                going = theirs & {p.ref.uid for p in info.pods}
                if going:
                    by_node.setdefault(node, set()).update(going)
        for node, going in by_node.items():
            info = self.infos.get(node)
            if info is not None:
                self._touch(node, (p for p in info.pods if p.ref.uid not in going))
        return set(by_node)

    def _bound(self, key: GangKey) -> set[str]:
        """The uids of the members of ``key`` bound in the play's world."""
        gang = self.gangs.get(key)
        members = gang.members if gang is not None else ()
        return {p.ref.uid for p in members if (now := self.pods.get(p.ref.uid)) and now.bound}

    def _end(self, key: GangKey, *, at: float) -> None:
        uids = self._bound(key)
        for node in self._remove(uids):
            self.freed.setdefault(node, []).append((at, key))

    def _remember(self, memory: Mapping[GangKey, GangState]) -> None:
        """The pass's memory kept; the nodes whose holds it let go changed (``ClusterCache.
        remember``)."""
        held = {hold for state in self.memory.values() for hold in state.holds}
        still = {hold for state in memory.values() for hold in state.holds}
        self.memory = dict(memory)
        for _, node in sorted(held - still, key=lambda hold: hold[1]):
            info = self.infos.get(node)
            if info is not None:
                self._touch(node, info.pods)

    def _view(self) -> Snapshot:
        # As the cache's snapshot: only the gangs with someone to place. A gang all of whose
        # members run holds its room in the node infos, and resolving it again every
        # virtual pass was half of a play's time.
        pods = self.pods
        active = tuple(
            pod
            for uids in self.by_gang.values()
            if any((p := pods.get(uid)) is not None and not p.bound for uid in uids)
            for uid in uids
            if (pod := pods.get(uid)) is not None
        )
        return replace(
            self.base,
            pods=active,
            node_infos=self.infos,
            memory=self.memory,
            generation=self.generation,
            in_flight=frozenset(),
            leaving=frozenset(self.leaving),
            queue_waiting=None,
            queue_holdings=None,
        )

    # -- the play ---------------------------------------------------------------------------

    def run(self) -> Forecast:
        s = self.settings
        outcomes = {key: _Outcome() for key in waiting_gangs(self.gangs)}
        t = s.now
        while True:
            if s.cancelled():
                raise PlayCancelled(f"stopped after {self.passes} virtual passes")
            result = schedule(self._view(), now=t, config=s.config)
            self.passes += 1
            self.horizon = t
            self._apply(result, outcomes, at=t)
            open_ = [k for k, o in outcomes.items() if o.state is None]
            if not open_:
                break
            upcoming = [*self.ends.values()]
            if self.leaving:
                upcoming.append(t)
            if result.wake_at is not None and math.isfinite(result.wake_at):
                upcoming.append(result.wake_at)
            if result.evictions:
                upcoming.append(t)  # the victims are gone: the preemptor's pass comes next
            if not upcoming:
                self._stuck(outcomes, open_)
                break
            t = self._next(t, min(upcoming))
            if t > s.now + s.window:
                if self.ends:
                    why = f"not within {s.window:g}s"
                    self._stop(outcomes, open_, EtaState.BEYOND_WINDOW, why)
                else:  # only clocks are left (a timeout, say), and no room comes before them
                    self._stuck(outcomes, open_)
                break
            if self.passes >= s.max_passes:
                self._stop(
                    outcomes,
                    open_,
                    EtaState.OVER_BUDGET,
                    f"the play stopped after {self.passes} passes",
                )
                break
            self._advance(t)
        etas = {
            key: Eta(
                gang=key,
                state=o.state or EtaState.OVER_BUDGET,
                p50=o.at,
                behind=o.behind,
                reason=o.reason,
                placement=o.placement,
            )
            for key, o in outcomes.items()
        }
        return Forecast(at=s.now, etas=etas, passes=self.passes, horizon=self.horizon)

    def _next(self, t: float, target: float) -> float:
        """The first whole resolution after ``t`` at or past ``target``."""
        tick = self.settings.resolution
        base = self.settings.now
        steps = max(math.ceil(round((target - base) / tick, 9)), math.floor((t - base) / tick) + 1)
        return base + steps * tick

    def _advance(self, t: float) -> None:
        """What happens up to ``t``: leaving pods go, runs due end (earliest first)."""
        if self.leaving:
            self._remove(set(self.leaving))
            self.leaving.clear()
        self.stepped = []
        for key, end in sorted(self.ends.items(), key=lambda item: (item[1], item[0])):
            if end <= t:
                del self.ends[key]
                self._end(key, at=end)
                self.stepped.append(end)

    def _apply(self, result: Result, outcomes: dict[GangKey, _Outcome], *, at: float) -> None:
        s = self.settings
        for attempt in result.attempts:  # the pass reports the turns that tried a placement
            for key in attempt.gangs:
                outcome = outcomes.get(key)
                if outcome is not None and outcome.state is None:
                    outcome.tried = True
                    outcome.reason = attempt.status.message
        # A gang not tried says why in Events on its pods (or its PodGroup).
        for event in result.events:
            about = event.regarding
            pod = self.pods.get(about.uid) if about.kind == "Pod" else None
            gang = gang_key_of(pod) if pod is not None else GangKey(about.namespace, about.name)
            outcome = outcomes.get(gang)
            if outcome is not None and outcome.state is None and not outcome.tried:
                outcome.reason = event.message
        for group in result.bindings:
            for placed in group.gangs:
                nodes = {binding.node for binding in placed.bindings}
                start = self._start(nodes, at=at)
                for binding in placed.bindings:
                    self._place(binding.pod.uid, binding.node, at=start)
                key = placed.gang
                if key not in self.ends and key not in self.endless:  # a run begins
                    left = self._remaining(self.durations.get(key, Duration()), elapsed=0.0)
                    if left is None:
                        self.endless.add(key)
                    else:
                        self.ends[key] = start + left
                outcome = outcomes.get(key)
                if outcome is None or outcome.state is not None:
                    continue
                outcome.state = EtaState.FITS_NOW if at == s.now else EtaState.ESTIMATED
                outcome.at = start
                outcome.reason = ""
                outcome.behind = self._behind(nodes)
                outcome.placement = {b.pod: b.node for b in placed.bindings}
        victims = {e.pod.uid for e in result.evictions}
        if victims:
            hit = {gang_key_of(p) for uid, p in self.pods.items() if uid in victims}
            self._remove(victims)
            for key in hit:  # a gang that lost only some members runs on to its end
                if not self._bound(key):
                    self.ends.pop(key, None)
                    self.endless.discard(key)
        self._remember(result.memory)
        for key, outcome in outcomes.items():
            state = self.memory.get(key)
            if outcome.state is None and state is not None and state.timed_out:
                never = self._never_fits(self.gangs[key])
                if never:  # it would wait for ever: that says more than its timeout
                    outcome.state, outcome.reason = EtaState.NEVER_FITS, never
                    continue
                outcome.state = EtaState.TIMES_OUT
                outcome.reason = (
                    f"it times out {at - s.now:g}s from now, before its room frees"
                    if at > s.now
                    else "it timed out already"
                )

    def _start(self, nodes: set[str], *, at: float) -> float:
        """When a gang placed by the pass at ``at`` starts: at the last end of the step
        just played that freed one of ``nodes``; failing that (room that came from elsewhere,
        a quota given back, say), at the last end of the step; failing that (a pass woken by
        a clock, or after its victims went), at ``at``. Each end of the step lies within one
        resolution before ``at``, as the clock jumps to the first step at or past an end."""
        if at == self.settings.now:
            return at
        since = at - self.settings.resolution
        step = [when for when in self.stepped if since < when <= at]
        mine = [
            when for node in nodes for when, _ in self.freed.get(node, ()) if since < when <= at
        ]
        return max(mine or step or [at])

    def _behind(self, nodes: set[str]) -> tuple[GangKey, ...]:
        ended = sorted((when, key) for node in nodes for when, key in self.freed.get(node, ()))
        named: list[GangKey] = []
        for _, key in reversed(ended):
            if key not in named:
                named.append(key)
            if len(named) == BEHIND:
                break
        return tuple(reversed(named))

    def _stuck(self, outcomes: dict[GangKey, _Outcome], open_: list[GangKey]) -> None:
        """Nothing more ends: what waits now waits for good, as far as the play knows."""
        blockers = [str(k) for k in sorted(self.endless)[:BEHIND]]
        if self.others:
            blockers.append("pods of other schedulers")
        for n, key in enumerate(open_):
            outcome = outcomes[key]
            too_big = self._never_fits(self.gangs[key], empty=n < EMPTY_CHECKS)
            if not outcome.tried:
                outcome.state = EtaState.NOT_READY
            elif too_big:
                outcome.state = EtaState.NEVER_FITS
                outcome.reason = f"{too_big}; {outcome.reason}".rstrip("; ")
            elif blockers:
                outcome.state = EtaState.BEHIND_UNKNOWN
                outcome.reason = (
                    f"waits behind what has no known end ({', '.join(blockers)}); "
                    f"{outcome.reason}".rstrip("; ")
                )
            else:
                outcome.state = EtaState.NEVER_FITS
                outcome.reason = (
                    "does not fit even once every run with a known end has ended; "
                    f"{outcome.reason}".rstrip("; ")
                )

    def _never_fits(self, gang: Gang, *, empty: bool = True) -> str:
        """Why the gang fits no way the nodes could be emptied ("" if it may fit): by the
        sums of what they have, and with ``empty`` on the nodes emptied of every pod (past
        the first EMPTY_CHECKS gangs that costs too much)."""
        if too_big := self._too_big(gang):
            return too_big
        if empty and not _fits_empty(self.base.nodes, gang):
            return "it does not fit even on the nodes emptied of every pod"
        return ""

    def _too_big(self, gang: Gang) -> str:
        """Why ``gang`` fits no cluster of these nodes, however empty: a member larger than
        every node, or members that ask more than all of them have; "" if neither."""
        nodes = [n.allocatable for n in self.base.nodes.values()]
        waiting = pending(gang)
        for pod in waiting:
            for resource, amount in pod.requests.items():
                if amount > max((a.get(resource, 0) for a in nodes), default=0):
                    return f"{pod.ref.name} asks for more {resource} than any node has"
        for resource in {r for pod in waiting for r in pod.requests}:
            asked = sum(pod.requests.get(resource, 0) for pod in waiting)
            if asked > sum(a.get(resource, 0) for a in nodes):
                return f"its members ask for more {resource} than all nodes together have"
        return ""

    def _stop(
        self, outcomes: dict[GangKey, _Outcome], open_: list[GangKey], state: EtaState, why: str
    ) -> None:
        for key in open_:
            outcome = outcomes[key]
            outcome.state = state if outcome.tried else EtaState.NOT_READY
            outcome.reason = why if outcome.tried else outcome.reason
