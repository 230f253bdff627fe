"""``bench.beside``: the bigger tier's runs, one scheduler each on a control plane of its own,
put in the one table a run of all of them would have written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.beside import main, merged
from bench.run import markdown
from bench.runs import Results, Run


def _run(scheduler: str, figures: dict, *, nodes: int = 10000) -> Results:
    return Results.from_json({
        "machine": "2 cores", "control_plane": "v1.36.3", "nodes": nodes, "concurrency": 32,
        "client": {"qps": 5000, "burst": 5000}, "largest_gang": 256,
        "contention_timeout_seconds": 120, "audit": True, "quiet_seconds": 5.0,
        "quiet_cap_seconds": 30.0,
        "schedulers": {scheduler: {"label": scheduler.replace("_", "-"), "version": "v1"}},
        "rounds": [
            {"order": [scheduler], "workloads": {"backlog_mixed_gangs": {scheduler: figures}}},
        ],
    })  # fmt: skip


def _json(scheduler: str, figures: dict) -> dict:
    return _run(scheduler, figures).to_json()


OURS = {"pods": 60000, "pods_per_second": 211.4, "start_to_first_bind_seconds": 13.0}
PEER_OUT_OF_TIME = {"error": "TimeoutError: only 0 pods bound in 600s", "pods": 60000,
                    "pods_bound": 0}  # fmt: skip


def test_runs_apart_share_one_round_with_ours_first() -> None:
    results = merged([_run("kube_scheduler", PEER_OUT_OF_TIME), _run("gang_scheduler", OURS)])
    assert list(results.schedulers) == ["gang_scheduler", "kube_scheduler"]
    assert results.rounds[0].order == ("gang_scheduler", "kube_scheduler")
    runs = results.rounds[0].workloads["backlog_mixed_gangs"]
    assert runs == {"gang_scheduler": Run(OURS), "kube_scheduler": Run(PEER_OUT_OF_TIME)}


def test_the_table_shows_a_peer_that_ran_out_of_time_beside_ours() -> None:
    table = markdown(
        merged([_run("gang_scheduler", OURS), _run("kube_scheduler", PEER_OUT_OF_TIME)])
    )
    assert "| gang-scheduler | 211.4 |" in table
    assert (
        "| kube-scheduler | failed (TimeoutError: only 0 pods bound in 600s; 0 of 60000 pods bound)"
        in table
    )


def test_runs_at_different_sizes_cannot_share_a_table() -> None:
    with pytest.raises(ValueError, match="differ in nodes"):
        merged([_run("gang_scheduler", OURS), _run("kube_scheduler", OURS, nodes=5000)])


def test_one_scheduler_run_twice_cannot_share_a_table() -> None:
    with pytest.raises(ValueError, match="gang_scheduler ran in more than one"):
        merged([_run("gang_scheduler", OURS), _run("gang_scheduler", OURS)])


def test_main_puts_together_the_runs_of_that_name_only(tmp_path: Path) -> None:
    name = "gang-scheduling-xl-backlog-mixed-gangs"
    (tmp_path / f"{name}-only-gang-scheduler.json").write_text(
        json.dumps(_json("gang_scheduler", OURS))
    )
    (tmp_path / f"{name}-only-kube-scheduler.json").write_text(
        json.dumps(_json("kube_scheduler", PEER_OUT_OF_TIME))
    )
    # another step's run of a peer, which must stay out of this table
    (tmp_path / "gang-scheduling-xl-latency-mixed-gangs-only-coscheduling.json").write_text(
        json.dumps(_json("coscheduling", OURS))
    )
    assert main([name], results=tmp_path) == 0
    written = json.loads((tmp_path / f"{name}.json").read_text())
    assert list(written["schedulers"]) == ["gang_scheduler", "kube_scheduler"]
    table = (tmp_path / f"{name}.md").read_text()
    assert table.startswith("<!-- Put together by `python -m bench.beside` from runs made apart")
    assert f"`{name}-only-kube-scheduler.json`" in table


def test_main_says_what_to_run_when_there_is_nothing_to_put_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["gang-scheduling-xl-backlog-mixed-gangs"], results=tmp_path) == 1
    assert "run each scheduler with --only first" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"schedulers": "x", "rounds": []}'])
def test_main_names_a_file_that_is_not_a_run_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    name = "gang-scheduling-xl-backlog-mixed-gangs"
    (tmp_path / f"{name}-only-gang-scheduler.json").write_text(
        json.dumps(_json("gang_scheduler", OURS))
    )
    (tmp_path / f"{name}-only-kube-scheduler.json").write_text(text)
    assert main([name], results=tmp_path) == 1
    assert f"{name}-only-kube-scheduler.json" in capsys.readouterr().err
    assert not (tmp_path / f"{name}.md").exists()
