"""The backlog with volumes in ``make bench`` (bench/run.py): on by default at the standard
tier, 3,000 pods in gangs of 4 to 8 (fewer pods in a quick run), kube-scheduler's as single
pods; each pod naming its own claim; a run at other sizes writes a file of its own; and its
table on the bench's page."""

from __future__ import annotations

import argparse

import pytest

from bench.run import Gangs, markdown, parse, results_name, runs_volumes, volume_gangs
from bench.runs import Results, Round, Run
from bench.schedulers import Contender
from bench.volumes import claim_name, gang_sizes, with_claim


def contender(key: str) -> Contender:
    return Contender(key=key, label=key, scheduler_name=key, version="v", argv=(), gang_api="ours")


def test_the_standard_tier_runs_3000_pods_in_gangs_of_4_to_8_and_a_quick_run_fewer() -> None:
    args = parse([])
    assert runs_volumes(args)
    assert (args.volume_pods, args.volume_gangs) == (3000, (4, 8))
    assert parse(["--nodes", "100", "--pods", "500"]).volume_pods == 500
    assert not runs_volumes(parse(["--scale"]))
    assert not runs_volumes(parse(["--workload", "backlog_gangs_of_8"]))
    assert runs_volumes(parse(["--workload", "backlog_volumes"]))


def test_gang_sizes_are_read_as_smallest_to_largest() -> None:
    assert gang_sizes("4-8") == (4, 8)
    assert gang_sizes("8") == (8, 8)
    for wrong in ("8-4", "0-2", "four"):
        with pytest.raises(argparse.ArgumentTypeError):
            gang_sizes(wrong)
    assert parse(["--volume-gangs", "2-3"]).volume_gangs == (2, 3)


def test_a_run_at_other_volume_sizes_writes_a_file_of_its_own() -> None:
    assert results_name(parse([])) == "gang-scheduling"
    assert results_name(parse(["--nodes", "100", "--pods", "500"])) == "gang-scheduling-100-nodes"
    args = parse(["--nodes", "100", "--workload", "backlog_volumes", "--volume-pods", "200",
                  "--volume-gangs", "2-4"])  # fmt: skip
    assert results_name(args) == (
        "gang-scheduling-100-nodes-backlog-volumes-volumes-200-pods-in-gangs-of-2-to-4"
    )
    args = parse(["--workload", "backlog_gangs_of_8", "--volume-pods", "200"])
    assert results_name(args) == "gang-scheduling-backlog-gangs-of-8"


def test_gangs_of_4_to_8_for_gang_schedulers_and_as_many_single_pods_for_kube_scheduler() -> None:
    args = parse(["--volume-pods", "300"])
    gangs = volume_gangs(contender("gang_scheduler"), args)
    assert gangs.pods == 300
    assert gangs.sizes is not None
    assert all(4 <= size <= 8 for size in gangs.sizes[:-1])
    assert gangs == volume_gangs(contender("coscheduling"), args), "the same gangs for each"
    assert volume_gangs(contender("kube_scheduler"), args) == Gangs(None, singles=300)


def test_the_drawn_sizes_of_mixed_gangs_are_the_same_as_before_when_the_smallest_is_1() -> None:
    before = Gangs.mixed(500, largest=64, seed=1)
    assert Gangs.mixed(500, largest=64, seed=1, smallest=1) == before
    assert before.pods == 500


def test_each_pod_names_a_claim_of_its_own() -> None:
    pod = {"metadata": {"name": "g1-3"}, "spec": {"schedulerName": "s", "containers": []}}
    dressed = with_claim(pod)
    assert dressed["spec"]["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": claim_name("g1-3")}}
    ]
    assert "volumes" not in pod["spec"], "the manifest given is left as it was"


def test_the_page_has_the_backlog_with_volumes_and_its_own_table() -> None:
    figures = {
        "pods": 300, "gangs": 50, "gangs_whole": 50, "pods_per_second": 60.0,
        "claims_on_pod_node": 300, "pods_bound_before_claim": 0, "bind_order_unchecked": 0,
        "claim_binding_p50_ms": 900.0, "claim_binding_p99_ms": 4000.0,
        "bind_after_claim_p50_ms": 120.0, "bind_after_claim_p99_ms": 400.0,
    }  # fmt: skip
    theirs = {**figures, "gangs": 0, "gangs_whole": 0, "bind_after_claim_p99_ms": 1200.0}
    results = Results(
        {"nodes": 100, "machine": "2 cores", "client": {"qps": 5000.0, "burst": 5000},
         "volume_pods": 300, "volume_gangs": [4, 8]},
        schedulers={"gang_scheduler": {"label": "gang-scheduler", "version": "v"},
                    "kube_scheduler": {"label": "kube-scheduler", "version": "v"}},
        rounds=(Round(order=("gang_scheduler", "kube_scheduler"), workloads={
            "backlog_volumes": {"gang_scheduler": Run(figures), "kube_scheduler": Run(theirs)}
        }),),
    )  # fmt: skip
    page = markdown(results)
    assert "## Backlog with volumes, gangs of 4 to 8 (kube-scheduler: single pods)" in page
    assert "Volumes (ratios: claim bound to pod bound, p99):" in page
    row = next(line for line in page.splitlines() if line.startswith("| gang-scheduler | 300 |"))
    assert row.split(" | ")[1:9] == ["300", "300", "0", "0", "900", "4000", "120", "400"]
    assert row.endswith("| 1 | 3 |")
    assert "PV controller (client QPS 5000, as the schedulers')" in page
