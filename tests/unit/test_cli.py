import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler import __version__
from scheduler.cli import _names, build_parser, main


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out.startswith(f"gang-scheduler {__version__} ")


def test_help_lists_the_version_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    assert "version" in capsys.readouterr().out


def test_unknown_command_is_a_usage_error_that_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["schedule-everything"])
    assert exit_.value.code == 2
    assert "schedule-everything" in capsys.readouterr().err


def test_topology_from_labels_reads_level_label_pairs() -> None:
    args = build_parser().parse_args(
        ["run", "--topology-from-labels", "rack=example.com/rack, zone=topology.kubernetes.io/zone"]
    )
    assert args.topology_from_labels == (
        ("rack", "example.com/rack"),
        ("zone", "topology.kubernetes.io/zone"),
    )


def test_topology_from_labels_without_a_label_says_the_form_expected(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["run", "--topology-from-labels", "rack"])
    assert exit_.value.code == 2
    assert "'rack' is not LEVEL=LABEL" in capsys.readouterr().err


def test_a_repeated_scheduler_name_answers_every_name_the_first_being_the_identity() -> None:
    args = build_parser().parse_args(
        [
            "run",
            "--scheduler-name", "gang-scheduler",
            "--scheduler-name", "scheduler-plugins-scheduler",
            "--scheduler-name", "volcano",
            "--scheduler-name", "volcano",
        ]
    )  # fmt: skip
    names = _names(args.scheduler_name)
    assert names == {
        "scheduler_name": "gang-scheduler",
        "aliases": ("scheduler-plugins-scheduler", "volcano"),
    }


def test_scheduler_name_defaults_to_gang_scheduler_alone() -> None:
    assert _names(build_parser().parse_args(["run"]).scheduler_name) == {
        "scheduler_name": "gang-scheduler",
        "aliases": (),
    }


def test_an_empty_scheduler_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["run", "--scheduler-name", " "])
    assert exit_.value.code == 2
    assert "a scheduler name is a non-empty word" in capsys.readouterr().err


def test_kube_api_qps_and_burst_default_to_no_limit() -> None:
    args = build_parser().parse_args(["run"])
    assert (args.kube_api_qps, args.kube_api_burst) == (0.0, 0)
    args = build_parser().parse_args(["run", "--kube-api-qps", "500", "--kube-api-burst", "800"])
    assert (args.kube_api_qps, args.kube_api_burst) == (500.0, 800)


def test_the_command_line_loads_without_rich_yet_leaves_it_importable() -> None:
    """structlog's console renderer would import rich (a development install has it) only
    for coloured tracebacks: a tenth of a second of every start. It is hidden while
    structlog loads, and only then."""
    probe = (
        "import sys; import scheduler.cli; loaded = 'rich' in sys.modules; "
        "import importlib.util; print(loaded, importlib.util.find_spec('rich') is not None)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert out[0] == "False", "importing scheduler.cli loaded rich"
    # Where rich is installed (import-linter brings it), it can still be imported later.
    installed = importlib.util.find_spec("rich") is not None
    assert out[1] == str(installed)


def test_stale_gang_after_is_off_by_default_and_refuses_a_negative_grace(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert build_parser().parse_args(["run"]).stale_gang_after is None
    assert build_parser().parse_args(["run"]).fair_share_half_life is None
    assert build_parser().parse_args(["run", "--stale-gang-after", "90"]).stale_gang_after == 90
    for bad in ("-1", "nan", "soon"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["run", "--stale-gang-after", bad])
        assert "a number of seconds, 0 or more" in capsys.readouterr().err


def test_explain_takes_a_gang_or_cluster_and_says_so_when_given_neither(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = build_parser().parse_args(["explain", "--cluster"])
    assert (args.gang, args.cluster) == (None, True)
    assert main(["explain"]) == 2
    assert "give the gang as NAMESPACE/NAME (or --cluster)" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["top"], ["explain", "ml/huge"], ["explain", "--cluster"]])
def test_explain_and_top_say_in_one_line_when_they_cannot_read_the_cluster(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No kubeconfig, or one naming an API server that refuses the connection: exit 2 and
    one line, not a traceback (as snapshot does)."""
    closed = tmp_path / "closed.yaml"
    closed.write_text(
        "apiVersion: v1\nkind: Config\n"
        'clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]\n'
        "users: [{name: u, user: {}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    for kubeconfig in (tmp_path / "missing.yaml", closed):
        assert main([*command, "--kubeconfig", str(kubeconfig)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: could not read the cluster: "), err
        assert "Traceback" not in err


def test_actions_default_to_every_action_and_take_a_comma_separated_order() -> None:
    assert build_parser().parse_args(["run"]).actions == (
        "finish-evictions", "allocate", "hold-head", "evict-stale", "preempt", "reclaim"
    )  # fmt: skip
    given = build_parser().parse_args(["run", "--actions", "allocate, preempt"])
    assert given.actions == ("allocate", "preempt")


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("allocate,preemt", "unknown action(s) 'preemt'; the actions are: finish-evictions"),
        ("allocate,allocate", "action(s) named twice: allocate"),
        ("", "no action named; the actions are: finish-evictions, allocate"),
    ],
)
def test_an_unknown_or_repeated_action_is_refused_at_start_with_the_known_ones(
    capsys: pytest.CaptureFixture[str], given: str, said: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["run", "--actions", given])
    assert exit_.value.code == 2
    assert said in capsys.readouterr().err


def test_reserve_without_forecasts_is_refused_at_start(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "--actions", "allocate,reserve"]) == 2
    assert "give --forecast-interval too" in capsys.readouterr().err
