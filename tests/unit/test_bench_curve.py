"""The cost curve (bench/curve.py): ours, median over rounds, and growth from size to size."""

from __future__ import annotations

from bench.curve import figure, merged, table
from bench.runs import Results

typed = Results.from_json


def run(pods_per_second: list[float], passes: float) -> dict:
    return {
        "rounds": [
            {
                "workloads": {
                    "backlog_mixed_gangs": {
                        "gang_scheduler": {"pods_per_second": p, "passes": passes, "pods": 10}
                    }
                }
            }
            for p in pods_per_second
        ]
    }


def test_a_figure_is_the_median_of_our_rounds_and_a_failed_round_is_left_out() -> None:
    results = run([300, 500, 400], passes=7)
    results["rounds"].append(
        {"workloads": {"backlog_mixed_gangs": {"gang_scheduler": {"error": "Broken: ..."}}}}
    )
    results = Results.from_json(results)
    assert figure(results, "backlog_mixed_gangs", "pods_per_second") == 400
    assert figure(results, "latency_mixed_gangs", "gang_latency_p99_ms") is None


def test_the_table_gives_each_size_and_its_growth_over_the_size_before() -> None:
    text = table([(1000, typed(run([400], passes=10))), (5000, typed(run([300], passes=25)))])
    assert "the nodes grow 5x" in text
    row = next(line for line in text.splitlines() if line.startswith("| passes (backlog)"))
    assert row == "| passes (backlog) | 10 | 25 | 2.50 |"
    row = next(line for line in text.splitlines() if line.startswith("| pods/s from start"))
    assert row == "| pods/s from start | 400 | 300 | 0.75 |"


def test_a_step_run_alone_fills_its_rows_and_comes_before_a_run_of_both() -> None:
    both = run([300], passes=7)
    both["rounds"][0]["workloads"]["latency_mixed_gangs"] = {
        "gang_scheduler": {"gang_latency_p99_ms": 900.0, "passes": 40}
    }
    alone = {
        "rounds": [
            {
                "workloads": {
                    "latency_mixed_gangs": {
                        "gang_scheduler": {"gang_latency_p99_ms": 250.0, "passes": 30}
                    }
                }
            }
        ]
    }
    alone, both = typed(alone), typed(both)
    results = merged([alone, both])
    assert figure(results, "latency_mixed_gangs", "gang_latency_p99_ms") == 250
    assert figure(results, "backlog_mixed_gangs", "pods_per_second") == 300
    assert figure(merged([both]), "latency_mixed_gangs", "gang_latency_p99_ms") == 900
