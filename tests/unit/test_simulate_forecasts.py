"""The simulator checks the forward play: every so often a forecast from the pass's snapshot,
each waiting gang's first estimate set against the start it got (``--forecast-every``)."""

from __future__ import annotations

from pathlib import Path

from scheduler.sim.reporting import eta_errors, write
from scheduler.sim.simulating import simulate
from scheduler.sim.traces import Job
from tests.unit.test_simulate import document


def _line() -> list[Job]:
    """Four whole-cluster jobs (4 nodes of 8 GPUs) arriving together: each starts when the
    one before ends, 10, 20 and 30 minutes in."""
    return [Job(at=0.0, name=f"j{i}", members=4, gpu=8, duration=600.0) for i in range(4)]


def test_with_every_duration_known_and_nothing_arriving_later_the_estimates_are_exact() -> None:
    run = simulate(document(4), _line(), step=5.0, forecast_every=60.0)
    assert sorted((name, predicted, actual) for name, _, predicted, actual in run.etas) == [
        ("j1", 600.0, 600.0),
        ("j2", 1200.0, 1200.0),
        ("j3", 1800.0, 1800.0),
    ]
    assert eta_errors(run)["within 10% of the wait"] == "100%"


def test_without_forecasts_the_play_and_its_report_are_as_before(tmp_path: Path) -> None:
    plain = simulate(document(4), _line(), step=5.0)
    seen = simulate(document(4), _line(), step=5.0, forecast_every=60.0)
    assert (plain.waits, plain.passes) == (seen.waits, seen.passes)
    assert plain.forecasts == 0
    report = write([plain], tmp_path / "plain", title="t", inputs=[]).read_text()
    assert "Expected starts" not in report
    report = write([seen], tmp_path / "seen", title="t", inputs=[]).read_text()
    assert "## Expected starts against actual starts" in report
