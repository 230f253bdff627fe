"""``gang-scheduler forecast SNAPSHOT [--add-nodes NODE=COUNT]``: each waiting gang's expected
start from a snapshot file, and what more nodes would change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.cli import main
from scheduler.model import names
from scheduler.sim.forecasting import forecast_lines, with_nodes
from tests.unit.test_simulate import document


def _pod(name: str, *, gang: str, gpus: int, node: str = "", lasts: str = "") -> dict:
    notes = {names.KOORD_NAME: gang, names.KOORD_MIN_AVAILABLE: "1"}
    if lasts:
        notes[names.EXPECTED_DURATION] = lasts
    spec: dict = {
        "schedulerName": "gang-scheduler",
        "containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name, "namespace": "ml", "uid": f"uid-{name}", "annotations": notes,
            "creationTimestamp": "2025-12-31T23:00:00Z",
        },
        "spec": spec,
        "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}
        if node else {"phase": "Pending"},
    }  # fmt: skip


def _cluster() -> dict:
    """One node of 8 GPUs, its GPUs taken for 30 minutes; a gang of one 8-GPU pod waits."""
    return document(
        1,
        pods=[
            _pod("run", gang="run", gpus=8, node="gpu-0", lasts="30m"),
            _pod("wait", gang="wait", gpus=8),
        ],
    )


def test_a_waiting_gang_is_expected_when_the_run_ahead_of_it_ends() -> None:
    lines = forecast_lines(_cluster(), resolution=60)
    assert lines[0].split() == ["NAMESPACE", "GANG", "ETA", "BEHIND", "/", "WHY"]
    assert lines[1].split() == ["ml", "wait", "30m", "ml/run"]


def test_more_nodes_show_beside_what_today_gives() -> None:
    lines = forecast_lines(_cluster(), adding=("gpu-0", 1), resolution=60)
    assert "ETA WITH 1 MORE gpu-0" in lines[0]
    assert lines[1].split()[:4] == ["ml", "wait", "30m", "now"]


def test_copies_get_names_of_their_own() -> None:
    doc = with_nodes(_cluster(), "gpu-0", 2)
    assert [n["metadata"]["name"] for n in doc["lists"]["nodes"]] == [
        "gpu-0", "gpu-0-more-1", "gpu-0-more-2"
    ]  # fmt: skip


def test_the_command_reads_a_file_and_refuses_a_node_it_does_not_have(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(_cluster()))
    assert main(["forecast", str(path)]) == 0
    assert "ml/run" in capsys.readouterr().out
    assert main(["forecast", str(path), "--add-nodes", "gpu-9=2"]) == 2
    assert "no node 'gpu-9' in the snapshot" in capsys.readouterr().err
    assert main(["forecast", str(path), "--add-nodes", "gpu-0"]) == 2
    assert "--add-nodes takes NODE=COUNT" in capsys.readouterr().err
