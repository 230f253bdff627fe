"""The forward play: a waiting gang's expected start is when the runs ahead of it end, as
the real pass would place it then."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core.explaining import eta_lines
from scheduler.core.forecasting import forecast
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.forecasts import Eta, EtaState
from scheduler.model.pods import GangKey, Pod
from tests.unit.builders import T0, gang_pods, node, pod, snapshot

# No timeout unless a test gives one: the default (600 s) would end most plays here.
CONFIG = Config(default_timeout_seconds=1e9)


def running(name: str, count: int, *, cpu: str = "2", ago: float, lasts: str | None) -> list[Pod]:
    """A gang of ours that has run on n0 for ``ago`` seconds; ``lasts``: its declared
    expected duration (None: unknown)."""
    said = {names.EXPECTED_DURATION: lasts} if lasts else None
    return [
        replace(p, node_name="n0", phase="Running", started=T0 - ago)
        for p in gang_pods(name, count, gang=name, min_available=count, cpu=cpu, annotations=said)
    ]


def waiting(name: str, count: int, *, cpu: str = "2", lasts: str | None = None, **kw) -> list[Pod]:
    said = {names.EXPECTED_DURATION: lasts} if lasts else None
    return gang_pods(name, count, gang=name, min_available=count, cpu=cpu, annotations=said, **kw)


def past_runs(*seconds: float) -> list[Pod]:
    """Gangs job-x-0, job-x-1, ... of one pod that ran to their end on n1, taking
    ``seconds`` each."""
    return [
        replace(p, node_name="n1", phase="Succeeded", started=T0 - 5000, finished=T0 - 5000 + s)
        for i, s in enumerate(seconds)
        for p in gang_pods(f"job-x-{i}", 1, gang=f"job-x-{i}", min_available=1)
    ]


def key(name: str) -> GangKey:
    return GangKey("default", name)


def test_a_gang_that_fits_now_is_expected_now() -> None:
    snap = snapshot([node("n0", cpu="8")], waiting("w", 2))
    eta = forecast(snap, now=T0, config=CONFIG).etas[key("w")]
    assert (eta.state, eta.p50, eta.p90) == (EtaState.FITS_NOW, T0, T0)


def test_a_gang_waits_until_the_run_holding_its_room_ends() -> None:
    """r has run 2 of its 10 minutes on the only node: w starts in 8."""
    pods = [*running("r", 4, ago=120, lasts="10m"), *waiting("w", 4)]
    eta = forecast(snapshot([node("n0", cpu="8")], pods), now=T0, config=CONFIG).etas[key("w")]
    assert eta.state is EtaState.ESTIMATED
    assert eta.p50 == T0 + 480
    assert eta.behind == (key("r"),)


def test_gangs_in_line_start_one_after_the_other() -> None:
    """a is older than b; each takes the whole node for 5 minutes once r has ended."""
    pods = [
        *running("r", 4, ago=0, lasts="5m"),
        *waiting("a", 4, lasts="5m", created=T0 - 200),
        *waiting("b", 4, lasts="5m", created=T0 - 100),
    ]
    etas = forecast(snapshot([node("n0", cpu="8")], pods), now=T0, config=CONFIG).etas
    assert etas[key("a")].p50 == T0 + 300
    assert etas[key("b")].p50 == T0 + 600
    assert etas[key("b")].behind == (key("r"), key("a"))


def test_a_start_is_said_at_the_end_that_made_room_not_at_the_rounded_step() -> None:
    """The pass that places w runs at the step after r's end (120 s at a resolution of 60),
    but w is said to start when r ends, as the live scheduler would bind it."""
    pods = [*running("r", 4, ago=0, lasts="61s"), *waiting("w", 4)]
    snap = snapshot([node("n0", cpu="8")], pods)
    assert forecast(snap, now=T0, config=CONFIG, resolution=60).etas[key("w")].p50 == T0 + 61
    assert forecast(snap, now=T0, config=CONFIG, resolution=10).etas[key("w")].p50 == T0 + 61


def test_ends_within_one_step_are_played_in_one_pass() -> None:
    """r0 and r1 end 10 s apart: at a resolution of 60 one virtual pass places both
    waiting gangs, each said to start at the end on its own node."""
    pods = [
        *running("r0", 4, ago=0, lasts="61s"),
        *[replace(p, node_name="n1") for p in running("r1", 4, ago=0, lasts="71s")],
        *waiting("a", 4, created=T0 - 200),
        *waiting("b", 4, created=T0 - 100),
    ]
    nodes = [node("n0", cpu="8"), node("n1", cpu="8")]
    coarse = forecast(snapshot(nodes, pods), now=T0, config=CONFIG, resolution=60)
    fine = forecast(snapshot(nodes, pods), now=T0, config=CONFIG, resolution=5)
    assert sorted(e.p50 - T0 for e in coarse.etas.values()) == [61, 71]
    assert sorted(e.p50 - T0 for e in fine.etas.values()) == [61, 71]
    assert coarse.passes < fine.passes


def test_a_line_of_runs_does_not_drift_by_a_step_a_run() -> None:
    """a starts when r ends (61 s) and runs 61 s: b starts at 122 s, not at the step after
    a step (240 s at a resolution of 60)."""
    pods = [
        *running("r", 4, ago=0, lasts="61s"),
        *waiting("a", 4, lasts="61s", created=T0 - 200),
        *waiting("b", 4, lasts="61s", created=T0 - 100),
    ]
    etas = forecast(
        snapshot([node("n0", cpu="8")], pods), now=T0, config=CONFIG, resolution=60
    ).etas
    assert (etas[key("a")].p50, etas[key("b")].p50) == (T0 + 61, T0 + 122)


def test_the_p90_play_takes_every_run_at_its_90th_percentile() -> None:
    """Three finished runs of job-x took 100, 200 and 1000 s: one running since now ends
    at 200 s in the median play and at 1000 s in the bad one."""
    eta = _behind_a_job_x(ran=0)
    assert (eta.p50, eta.p90) == (T0 + 200, T0 + 1000)


def test_a_run_past_its_median_is_expected_to_its_90th_percentile() -> None:
    assert _behind_a_job_x(ran=300).p50 == T0 + 700


def _behind_a_job_x(*, ran: float) -> Eta:
    """w waits for n0, which job-x-9 fills, running for ``ran`` seconds; three earlier
    job-x runs took 100, 200 and 1000 s."""
    run = [
        replace(p, node_name="n0", phase="Running", started=T0 - ran)
        for p in gang_pods("job-x-9", 4, gang="job-x-9", min_available=4, cpu="2")
    ]
    pods = [*past_runs(100, 200, 1000), *run, *waiting("w", 4)]
    nodes = [node("n0", cpu="8"), node("n1", cpu="1")]
    found = forecast(snapshot(nodes, pods), now=T0, config=CONFIG, resolution=10)
    return found.etas[key("w")]


def test_a_gang_behind_a_run_of_unknown_length_says_so() -> None:
    pods = [*running("r", 4, ago=60, lasts=None), *waiting("w", 4)]
    eta = forecast(snapshot([node("n0", cpu="8")], pods), now=T0, config=CONFIG).etas[key("w")]
    assert eta.state is EtaState.BEHIND_UNKNOWN
    assert eta.p50 is None
    assert "default/r" in eta.reason


def test_a_gang_that_fits_no_way_the_nodes_are_filled_never_fits() -> None:
    """Two members of 5 cpu, two nodes of 8 with a member of 4 each on them for a minute:
    the nodes' room adds up, but no node takes two."""
    pods = [*running("r", 1, cpu="4", ago=0, lasts="1m"), *waiting("w", 3, cpu="5")]
    eta = forecast(
        snapshot([node("n0", cpu="8"), node("n1", cpu="8")], pods), now=T0, config=CONFIG
    ).etas[key("w")]
    assert eta.state is EtaState.NEVER_FITS
    assert eta.reason.startswith("it does not fit even on the nodes emptied of every pod")


def test_a_gang_whose_timeout_comes_first_times_out_in_the_play() -> None:
    pods = [
        *running("r", 4, ago=0, lasts="30m"),
        *waiting("w", 4, waiting_time="5m"),
    ]
    eta = forecast(snapshot([node("n0", cpu="8")], pods), now=T0, config=CONFIG).etas[key("w")]
    assert eta.state is EtaState.TIMES_OUT
    assert eta.p50 is None


def test_a_start_beyond_the_window_is_not_guessed() -> None:
    pods = [*running("r", 4, ago=0, lasts="48h"), *waiting("w", 4)]
    snap = snapshot([node("n0", cpu="8")], pods)
    eta = forecast(snap, now=T0, config=CONFIG).etas[key("w")]
    assert eta.state is EtaState.BEYOND_WINDOW


def test_a_gang_not_ready_says_why() -> None:
    pods = waiting("w", 4, total=5)
    eta = forecast(snapshot([node("n0", cpu="8")], pods), now=T0, config=CONFIG).etas[key("w")]
    assert eta.state is EtaState.NOT_READY
    assert "5 members" in eta.reason


def test_the_same_snapshot_gives_the_same_forecast() -> None:
    pods = [
        *running("r", 4, ago=30, lasts="5m"),
        *waiting("a", 2, lasts="7m", created=T0 - 200),
        *waiting("b", 4, lasts="5m", created=T0 - 100),
        *waiting("c", 2, lasts="1m", created=T0 - 50),
    ]
    snap = snapshot([node("n0", cpu="8"), node("n1", cpu="4")], pods)
    assert forecast(snap, now=T0, config=CONFIG) == forecast(snap, now=T0, config=CONFIG)


def test_a_gang_that_preempts_is_expected_once_its_victims_are_gone() -> None:
    """The pass evicts r for the higher-priority w; the play's next pass, one resolution
    later, binds w where r ran."""
    low = running("r", 4, ago=0, lasts="1h")
    high = waiting("w", 4, priority=1000)
    snap = snapshot([node("n0", cpu="8")], [*low, *high])
    eta = forecast(snap, now=T0, config=CONFIG).etas[key("w")]
    assert (eta.state, eta.p50) == (EtaState.ESTIMATED, T0 + 60)


def test_only_waiting_gangs_get_an_eta() -> None:
    pods = [*running("r", 4, ago=0, lasts="5m"), *waiting("w", 2)]
    etas = forecast(snapshot([node("n0", cpu="16")], pods), now=T0, config=CONFIG).etas
    assert set(etas) == {key("w")}


def test_a_gang_whose_members_ask_more_than_the_nodes_have_never_fits() -> None:
    eta = forecast(snapshot([node("n0", cpu="8")], waiting("w", 5)), now=T0, config=CONFIG).etas[
        key("w")
    ]
    assert eta.state is EtaState.NEVER_FITS
    assert eta.reason.startswith("its members ask for more cpu than all nodes together have")


def test_a_non_strict_gang_behind_a_run_of_unknown_length_says_so() -> None:
    """Its parking asks for no wake-up (no flush in the play, no head time for NonStrict):
    an infinite time, which the clock must not jump to."""
    pods = [*running("r", 4, ago=60, lasts=None), *waiting("w", 4, mode="NonStrict")]
    eta = forecast(snapshot([node("n0", cpu="8")], pods), now=T0, config=CONFIG).etas[key("w")]
    assert eta.state is EtaState.BEHIND_UNKNOWN


def test_gangs_parked_by_the_live_pass_are_tried_afresh_in_the_play() -> None:
    """Left parked, w would never be tried in the play, and look not ready."""
    pods = [*running("r", 4, ago=0, lasts=None), *waiting("w", 4)]
    bare = snapshot([node("n0", cpu="8")], pods)
    snap = replace(bare, node_infos=bare.infos())  # as the cache gives it: gangs are parked
    memory = schedule(snap, now=T0, config=CONFIG).memory
    memory = schedule(replace(snap, memory=memory), now=T0 + 5, config=CONFIG).memory
    assert memory[key("w")].parked is not None
    eta = forecast(replace(snap, memory=memory), now=T0 + 5, config=CONFIG).etas[key("w")]
    assert eta.state is EtaState.BEHIND_UNKNOWN


def test_a_gang_that_lost_members_to_preemption_still_ends() -> None:
    """r runs 6 members (minimum 4) for 10 minutes; w, higher, takes two of them; x needs
    the whole node and starts once both have ended."""
    r = [
        replace(p, node_name="n0", phase="Running", started=T0)
        for p in gang_pods(
            "r", 6, gang="r", min_available=4, cpu="1",
            annotations={names.EXPECTED_DURATION: "10m"},
        )
    ]  # fmt: skip
    w = waiting("w", 2, cpu="1", lasts="20m", priority=1000)
    x = waiting("x", 1, cpu="6", lasts="5m", created=T0 - 10)
    etas = forecast(snapshot([node("n0", cpu="6")], [*r, *w, *x]), now=T0, config=CONFIG).etas
    assert etas[key("w")].state is EtaState.ESTIMATED
    assert etas[key("x")].p50 == T0 + 60 + 1200


def test_members_that_start_a_new_run_in_the_play_end_too() -> None:
    """r's two running members end at 5 minutes; its two others then run as a new
    incarnation for another 5; w, needing the whole node, comes after them."""
    r = [
        replace(p, node_name="n0", phase="Running", started=T0) if i < 2 else p
        for i, p in enumerate(
            gang_pods(
                "r", 4, gang="r", min_available=2, cpu="4",
                annotations={names.EXPECTED_DURATION: "5m"},
            )
        )
    ]  # fmt: skip
    w = waiting("w", 2, cpu="4", created=T0 + 10)
    etas = forecast(snapshot([node("n0", cpu="8")], [*r, *w]), now=T0, config=CONFIG).etas
    assert etas[key("w")].p50 == T0 + 600


def test_room_held_by_other_schedulers_pods_has_no_known_end() -> None:
    theirs = pod("daemon", scheduler="default-scheduler", cpu="6", node_name="n0", phase="Running")
    eta = forecast(
        snapshot([node("n0", cpu="8")], [theirs, *waiting("w", 2, cpu="2")]),
        now=T0,
        config=CONFIG,
    ).etas[key("w")]
    assert eta.state is EtaState.BEHIND_UNKNOWN
    assert "pods of other schedulers" in eta.reason


def test_explain_says_when_a_waiting_gang_is_expected_to_start_and_behind_whom() -> None:
    pods = [*running("r", 4, ago=120, lasts="10m"), *waiting("w", 4)]
    said = eta_lines(snapshot([node("n0", cpu="8")], pods), key("w"), now=T0, config=CONFIG)
    assert said == [
        "expected to start in 8m, once default/r ended: if the runs ahead of it end when "
        "expected and no gang that sorts ahead of it arrives"
    ]


def test_explain_says_why_there_is_no_expected_start() -> None:
    pods = [*running("r", 4, ago=60, lasts=None), *waiting("w", 4)]
    (said,) = eta_lines(snapshot([node("n0", cpu="8")], pods), key("w"), now=T0, config=CONFIG)
    assert said.startswith("no expected start (behind-unknown): waits behind what has no known")


def test_other_schedulers_pods_are_not_blamed_for_a_gang_its_nodes_cannot_take() -> None:
    """Another scheduler's pod holds room on n0, but w's members select n1, too small for
    them: that they never fit is said, not that they wait behind the pod."""
    theirs = pod("daemon", scheduler="default-scheduler", cpu="6", node_name="n0", phase="Running")
    w = waiting("w", 2, cpu="3", node_selector={"kubernetes.io/hostname": "n1"})
    nodes = [node("n0", cpu="8"), node("n1", cpu="4")]
    eta = forecast(snapshot(nodes, [theirs, *w]), now=T0, config=CONFIG).etas[key("w")]
    assert eta.state is EtaState.NEVER_FITS


def test_top_adds_an_eta_column_only_when_asked() -> None:
    from scheduler.core.explaining import top_lines, waiting_gangs  # noqa: PLC0415

    pods = [*running("r", 4, ago=120, lasts="10m"), *waiting("w", 4, created=T0 - 60)]
    snap = snapshot([node("n0", cpu="8")], pods)
    plain = top_lines(waiting_gangs(snap, now=T0, config=CONFIG), now=T0)
    assert "ETA" not in plain[0]
    timed = top_lines(waiting_gangs(snap, now=T0, config=CONFIG, forecasting=True), now=T0)
    assert timed[0].split()[:6] == ["NAMESPACE", "GANG", "QUEUE", "WAITING", "AGE", "ETA"]
    assert timed[1].split()[:6] == ["default", "w", "default", "4/4", "60s", "8m"]


def test_a_play_told_to_stop_stops_between_virtual_passes() -> None:
    from scheduler.core.forecasting import PlayCancelled  # noqa: PLC0415

    pods = [*running("r", 4, ago=0, lasts="10m"), *waiting("w", 4)]
    asked: list[int] = []

    def cancelled() -> bool:
        asked.append(1)
        return len(asked) > 1

    with pytest.raises(PlayCancelled, match="stopped after 1 virtual passes"):
        forecast(snapshot([node("n0", cpu="8")], pods), now=T0, config=CONFIG, cancelled=cancelled)


def test_a_gang_that_never_fits_is_said_so_rather_than_that_it_times_out() -> None:
    """With the default timeout (600 s) the play reaches it; that the gang never fits says
    more (integration: explain --forecast on a gang larger than its nodes)."""
    pods = [*running("r", 1, ago=0, lasts="1m"), *waiting("w", 5)]
    eta = forecast(snapshot([node("n0", cpu="8")], pods), now=T0, config=Config()).etas[key("w")]
    assert eta.state is EtaState.NEVER_FITS
