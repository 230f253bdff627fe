"""``make bench`` at another size than its tier's writes a file of its own, so a quick run
(``BENCH_ARGS="--nodes 100 --pods 400"``) never overwrites the tier's figures."""

from __future__ import annotations

import pytest

from bench.run import parse, results_name


def test_the_standard_tier_writes_gang_scheduling() -> None:
    assert results_name(parse([])) == "gang-scheduling"


def test_a_smaller_run_names_its_node_count() -> None:
    assert results_name(parse(["--nodes", "100", "--pods", "400"])) == "gang-scheduling-100-nodes"


def test_the_scale_tier_writes_its_own_file_at_its_own_size() -> None:
    assert results_name(parse(["--scale"])) == "gang-scheduling-scale"
    assert results_name(parse(["--scale", "--nodes", "16"])) == "gang-scheduling-scale-16-nodes"


def test_the_bigger_tier_is_10000_nodes_and_60000_pods_in_gangs_up_to_256() -> None:
    args = parse(["--scale-xl"])
    assert (args.nodes, args.pods, args.largest_gang, args.scale) == (10000, 60000, 256, True)
    assert results_name(args) == "gang-scheduling-xl"
    assert results_name(parse(["--scale-xl", "--nodes", "1000"])) == "gang-scheduling-xl-1000-nodes"


def test_the_skew_check_runs_the_coscheduling_rows_into_a_file_of_its_own() -> None:
    args = parse(["--skew"])
    assert args.only == ["coscheduling", "coscheduling_tuned"]
    assert results_name(args) == "gang-scheduling-skew"
    assert parse(["--skew", "--only", "gang_scheduler"]).only == ["gang_scheduler"]


def test_the_skew_check_refuses_kube_scheduler_which_needs_the_newer_api_server() -> None:
    with pytest.raises(SystemExit):
        parse(["--skew", "--only", "kube_scheduler"])


def test_a_run_of_some_workloads_writes_a_file_of_its_own() -> None:
    args = parse(["--scale-xl", "--nodes", "5000", "--workload", "latency_mixed_gangs"])
    assert results_name(args) == "gang-scheduling-xl-5000-nodes-latency-mixed-gangs"
    args = parse(["--workload", "backlog_single_pods", "--workload", "backlog_gangs_of_8"])
    assert results_name(args) == "gang-scheduling-backlog-gangs-of-8-backlog-single-pods"


def test_a_latency_step_at_another_rate_writes_a_file_of_its_own() -> None:
    args = parse(["--scale-xl", "--nodes", "5000", "--workload", "latency_mixed_gangs",
                  "--latency-rate", "100"])  # fmt: skip
    assert results_name(args) == (
        "gang-scheduling-xl-5000-nodes-latency-mixed-gangs-at-100-pods-per-second"
    )


def test_a_run_of_some_schedulers_writes_a_file_named_for_them() -> None:
    args = parse(["--only", "gang_scheduler", "--only", "coscheduling"])
    assert results_name(args) == "gang-scheduling-only-coscheduling-gang-scheduler"
    args = parse(["--scale-xl", "--workload", "backlog_mixed_gangs", "--only", "kube_scheduler"])
    assert results_name(args) == "gang-scheduling-xl-backlog-mixed-gangs-only-kube-scheduler"


def test_a_run_naming_every_scheduler_is_the_tiers_own() -> None:
    every = [a for s in ("gang_scheduler", "kube_scheduler", "coscheduling",
                         "coscheduling_tuned") for a in ("--only", s)]  # fmt: skip
    assert results_name(parse(every)) == "gang-scheduling"
