"""``bench.runs``: what ``bench.run`` found, typed, and read back from the files it wrote."""

from __future__ import annotations

import json

import pytest

from bench.report import RESULTS
from bench.run import markdown
from bench.runs import Results, Run

WRITTEN = sorted(
    p.name for p in RESULTS.glob("gang-scheduling*.json") if "rounds" in json.loads(p.read_text())
)


@pytest.mark.parametrize("name", WRITTEN)
def test_a_results_file_read_back_writes_the_same_file(name: str) -> None:
    data = json.loads((RESULTS / name).read_text())
    results = Results.from_json(data)
    assert results.to_json() == data
    assert markdown(Results.from_json(results.to_json())) == markdown(results)


def test_the_bench_has_results_files_to_read_back() -> None:
    assert len(WRITTEN) >= 10, "bench/results/gang-scheduling*.json: the bench's own figures"


def test_a_results_file_from_before_rounds_is_its_own_one_round() -> None:
    results = Results.from_json({
        "nodes": 100, "schedulers": {"gang": {"label": "gang-scheduler", "version": "v1"}},
        "bind_ceiling": {"pods": 10, "pods_per_second": 900.0},
        "workloads": {"backlog_gangs_of_8": {"gang": {"pods_per_second": 450.0}}},
    })  # fmt: skip
    (one,) = results.rounds
    assert one.ceiling("bind_ceiling", "pods_per_second") == 900.0
    assert results.figures("backlog_gangs_of_8", "gang", "pods_per_second") == [450.0]
    assert results.settings == {"nodes": 100}


def test_a_failed_run_reports_no_figure_and_says_how_far_it_got() -> None:
    run = Run({"error": "TimeoutError: 8 binds", "pods": 8, "pods_bound": 2, "seconds": 30})
    assert run.failed
    assert run.number("seconds") is None
    assert run.got() == "TimeoutError: 8 binds; 2 of 8 pods bound"
    assert Run({"quiet": True}).number("quiet") is None  # a flag is no figure
