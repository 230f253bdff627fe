"""The ETA check's figures (bench/etacheck.py): each gang's first estimate made while it
waited, against when its last member was bound."""

from __future__ import annotations

from bench.etacheck import Estimate, accuracy, with_durations
from bench.simcheck import pod_manifests
from scheduler.model import names
from scheduler.sim.traces import Job


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


def test_pods_declare_their_run_time_or_only_their_class() -> None:
    job = Job(at=0.0, name="j", members=2, gpu=1, duration=90.0)
    made = pod_manifests(job, gang="j", scheduler="s", node_selector={})
    declared = with_durations(made, job, learned=False)
    assert {m["metadata"]["annotations"][names.EXPECTED_DURATION] for m in declared} == {"90s"}
    made = pod_manifests(job, gang="j", scheduler="s", node_selector={})
    learned = with_durations(made, job, learned=True)
    assert all(names.EXPECTED_DURATION not in m["metadata"]["annotations"] for m in learned)
    assert {m["metadata"]["labels"][names.DURATION_CLASS] for m in learned} == {"gpus-2"}
