"""The ETA check's figures (bench/etacheck.py): each gang's first estimate made while it
waited, against when its last member was bound."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bench.etacheck import (
    Estimate,
    accuracy,
    markdown,
    overtaken,
    play,
    plot,
    with_durations,
    with_reserve,
)
from bench.simcheck import pod_manifests
from scheduler.cli import build_parser
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.model.times import parse_time
from scheduler.sim.traces import Job
from tests.unit.test_forecast_command import _pod
from tests.unit.test_simulate import document


def test_the_error_is_over_the_wait_left_from_the_estimate() -> None:
    estimates = {
        "a": Estimate(made=10.0, state="estimated", start=100.0, latest=150.0),  # 10 s early
        "b": Estimate(made=0.0, state="estimated", start=60.0, latest=None),  # right
    }
    found = accuracy(estimates, {"a": 110.0, "b": 60.0})
    assert found["gangs that waited"] == found["estimated"] == 2
    assert found["error p50 (s)"] == 0.0
    assert found["error p90 (s)"] == 10.0
    assert found["error / wait p90"] == 0.1  # 10 s of the 100 s it still waited
    assert found["started later than estimated"] == 1
    assert found["within 10% of the wait"] == "100%"


def test_a_gang_that_bound_at_once_or_never_is_not_judged() -> None:
    estimates = {
        "quick": Estimate(made=10.0, state="estimated", start=30.0, latest=None),
        "never": Estimate(made=10.0, state="estimated", start=30.0, latest=None),
    }
    found = accuracy(estimates, {"quick": 11.0})  # bound a second after the play
    assert found["gangs that waited"] == 0
    assert found["error / wait p50"] == 0.0


def test_a_gang_with_no_estimate_is_counted_by_its_state() -> None:
    estimates = {"big": Estimate(made=0.0, state="behind-unknown", start=None, latest=None)}
    found = accuracy(estimates, {"big": 300.0})
    assert found["gangs that waited"] == 1
    assert found["states"] == {"behind-unknown": 1}
    assert found["estimated"] == 0


def test_a_gang_posted_after_the_estimate_that_started_sooner_overtook_it() -> None:
    started = {"big": 300.0, "early": 100.0, "later": 200.0, "last": 400.0}
    submitted = {"big": 0.0, "early": 5.0, "later": 50.0, "last": 60.0}
    # Estimated at 20 s: "early" was there already, "last" started after big.
    assert overtaken("big", 20.0, started, submitted) == ["later"]
    assert overtaken("big", 70.0, started, submitted) == []


def test_the_figures_are_also_given_over_the_gangs_no_later_arrival_overtook() -> None:
    estimates = {
        "a": Estimate(made=10.0, state="estimated", start=90.0, latest=None),  # right
        "b": Estimate(made=10.0, state="estimated", start=60.0, latest=None),  # 100 s short
    }
    started = {"a": 90.0, "b": 160.0, "c": 100.0}
    submitted = {"a": 0.0, "b": 0.0, "c": 30.0}  # c came later and started before b
    found = accuracy(estimates, started, submitted)
    assert found["error / wait p90"] == 0.667
    assert found["not overtaken"] == 1
    assert found["error / wait p90, not overtaken"] == 0.0
    assert [g["overtaken by"] for g in found["gangs"]] == [[], ["c"]]


def test_the_report_has_a_line_and_a_point_for_each_gang_that_waited(tmp_path: Path) -> None:
    estimates = {"b": Estimate(made=10.0, state="estimated", start=60.0, latest=None)}
    found = accuracy(estimates, {"b": 160.0, "c": 100.0}, {"b": 0.0, "c": 30.0})
    results = {
        "durations": "declared", "jobs": 2, "snapshots": 3, "play seconds p50": 0.01,
        "plays": {"60 s": found, "5 s": found},
        "written (whole minutes)": accuracy(estimates, {"b": 160.0}),
        "plan": {},
    }  # fmt: skip
    text = markdown(results)
    assert "| b | 10.0 | 60.0 | 160.0 | 0.667 | c |" in text
    figure = plot(results, tmp_path / "eta.png")
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pods_declare_their_run_time_or_only_their_class() -> None:
    job = Job(at=0.0, name="j", members=2, gpu=1, duration=90.0)
    made = pod_manifests(job, gang="j", scheduler="s", node_selector={})
    declared = with_durations(made, job, learned=False)
    assert {m["metadata"]["annotations"][names.EXPECTED_DURATION] for m in declared} == {"90s"}
    made = pod_manifests(job, gang="j", scheduler="s", node_selector={})
    learned = with_durations(made, job, learned=True)
    assert all(names.EXPECTED_DURATION not in m["metadata"]["annotations"] for m in learned)
    assert {m["metadata"]["labels"][names.DURATION_CLASS] for m in learned} == {"gpus-2"}


def test_the_reserve_run_holds_room_by_reservation_in_hold_heads_place() -> None:
    """The scheduler run with --reserve takes reserve where the default actions hold the
    head gang, with the same flags a user would give (the CLI accepts them)."""
    actions = with_reserve(Config().actions)
    assert "hold-head" not in actions
    assert actions.index("reserve") == Config().actions.index("hold-head")
    flags = ["--forecast-interval", "10", "--actions", ",".join(actions)]
    assert build_parser().parse_args(["run", *flags]).actions == actions


def test_the_harness_plays_with_reservations_as_the_live_scheduler_makes_them() -> None:
    """One node of 8 GPUs: run holds 4 for 10 minutes, big (8, 20 minutes) waits, small
    (4, 30 minutes) came after it. The live scheduler with reserve holds the node for big
    from run's end and keeps small off it; the harness's play, from a snapshot of the API
    that holds no forecast, must too, or it says small starts now."""
    settings = replace(Config(default_timeout_seconds=1e9), actions=with_reserve(Config().actions))
    cluster = document(
        1,
        pods=[
            _pod("run", gang="run", gpus=4, node="gpu-0", lasts="10m"),
            _pod("big", gang="big", gpus=8, lasts="20m"),
            {**_pod("small", gang="small", gpus=4, lasts="30m"),
             "metadata": {**_pod("small", gang="small", gpus=4, lasts="30m")["metadata"],
                          "creationTimestamp": "2025-12-31T23:30:00Z"}},
        ],
    )  # fmt: skip
    now = parse_time("2026-01-01T00:00:00Z")
    found = play(cluster, now=now, settings=settings)[5.0]
    assert found["big"][:2] == ("estimated", now + 600)
    assert found["small"][0] == "estimated"
    assert found["small"][1] == now + 600 + 1200
