"""Regression tests from the review of #26 (snapshot, simulate, trace, fragmentation, the
chart): each was a reproducer of one finding, failing on the code as reviewed."""

from __future__ import annotations

import calendar
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from scheduler.core.fragmentation import measure
from scheduler.model.resources import Resources
from scheduler.shell import snapshotting
from scheduler.shell.snapshotting import API_VERSION, KIND
from scheduler.sim import traces
from scheduler.sim.anonymising import anonymise
from scheduler.sim.reporting import quantile
from scheduler.sim.simulating import _start_time, simulate
from scheduler.sim.traces import Job

GPU = "nvidia.com/gpu"


def node(name: str, gpus: int = 8) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [
                {"type": "InternalIP", "address": "10.20.30.40"},
                {"type": "Hostname", "address": name},
            ],
        },
    }


def document(nodes: int = 1, **lists: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"takenAt": "2026-01-01T00:00:00Z"},
        "unserved": [],
        "lists": {"nodes": [node(f"gpu-{i}") for i in range(nodes)]} | lists,
    }


class _Hang(Exception):
    pass


@pytest.fixture
def deadline():
    def fire(*_: object) -> None:
        raise _Hang("the simulation did not end")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


# -- simulate never ends / crashes on its step -----------------------------------------------


def test_simulate_rejects_a_step_of_zero(deadline: None) -> None:
    """--step 0 (or negative): t never advances while a gang waits (a hang), and with
    nothing waiting _next_time divides by it (ZeroDivisionError)."""
    jobs = [Job(at=0, name="a", members=1, gpu=8, duration=100)]
    with pytest.raises(ValueError, match="--step must be a positive number"):
        simulate(document(), jobs, step=0)


# -- traces: NaN / inf / bad lines -----------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        '{"at": 0, "name": "a", "members": 1, "gpu": 1, "duration": NaN}',
        '{"at": 0, "name": "a", "members": 1, "gpu": 1, "duration": Infinity}',
        '{"at": NaN, "name": "a", "members": 1, "gpu": 1}',
        '{"at": Infinity, "name": "a", "members": 1, "gpu": 1}',
    ],
)
def test_a_trace_with_a_non_finite_time_is_refused(tmp_path: Path, line: str) -> None:
    """NaN passes `duration <= 0` and `at < 0`: the gang never ends (NaN <= t is False) or
    never arrives, and simulate without --until loops for ever."""
    path = tmp_path / "t.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=r"t\.jsonl:1"):
        traces.read(path)


def test_a_nan_duration_is_refused_rather_than_never_ending(deadline: None) -> None:
    jobs = [Job(at=0, name="a", members=1, gpu=1, duration=float("nan"))]
    with pytest.raises(ValueError, match="finite"):
        simulate(document(), jobs, step=5)  # it ran for ever (the deadline raised)


@pytest.mark.parametrize("line", ["3", "null", "[1, 2]", "true"])
def test_a_trace_line_that_is_not_an_object_is_a_value_error(tmp_path: Path, line: str) -> None:
    """The CLI catches ValueError only: a line that is JSON but not an object is a
    TypeError traceback (set(3), set(None))."""
    path = tmp_path / "t.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=r"t\.jsonl:1"):
        traces.read(path)


def test_a_snapshot_that_is_neither_json_nor_yaml_is_a_value_error(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{"kind": "ClusterSnapshot", : [\n')
    with pytest.raises(ValueError, match="neither JSON nor YAML"):
        snapshotting.read(path)


def test_a_trace_job_named_like_a_retry_does_not_collide(deadline: None) -> None:
    """An evicted job "a" comes back as gang "a-r1": a trace job named "a-r1" is the same
    gang (members, job_of, pod uids overwritten)."""
    jobs = [
        Job(at=0, name="a", members=1, gpu=8, duration=1000, priority=0),
        Job(at=10, name="b", members=1, gpu=8, duration=100, priority=1000),
        Job(at=20, name="a-r1", members=1, gpu=8, duration=50, priority=0),
    ]
    run = simulate(document(), jobs, step=5)
    started = [w[0] for w in run.waits]
    assert run.preempted[-1] >= 1, "the setup must preempt a for this reproducer"
    # Every job of the trace finishes once ("a" after its retry): it was 2, "a" lost.
    assert run.finished == 3, (run.finished, run.waits)
    assert started.count("a") == 2
    assert "a-r1" in started


# -- the start time depends on the machine's time zone ---------------------------------------


def test_the_start_time_is_utc_whatever_the_time_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    """time.mktime(...) - time.timezone is an hour off in summer time (DST), so the same
    snapshot plays differently on machines in different zones."""
    monkeypatch.setenv("TZ", "Europe/London")
    time.tzset()
    try:
        doc = {"metadata": {"takenAt": "2026-07-01T00:00:00Z"}}
        assert _start_time(doc) == calendar.timegm((2026, 7, 1, 0, 0, 0))
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


# -- statistics ------------------------------------------------------------------------------


def test_the_nearest_rank_median_of_two_is_the_lower() -> None:
    """Nearest rank: the ceil(q*n)-th value; int(q*n) is one past it whenever q*n is whole
    (p50 of [1, 100] is 100, p99 of 100 values is the maximum)."""
    assert quantile([1, 100], 0.5) == 1
    assert quantile(list(range(1, 101)), 0.99) == 99


# -- fragmentation ---------------------------------------------------------------------------


def test_room_a_waiting_member_can_use_is_not_stranded() -> None:
    """'Smallest' is GPUs, then CPU, then memory: with shapes that do not compare, room the
    other waiting member fits in counts as stranded ("room nothing that waits can use")."""
    free = {"n1": Resources({"cpu": 4000, "memory": 8 * 2**30, "pods": 100})}
    waiting = [
        Resources({"cpu": 1000, "memory": 100 * 2**30, "pods": 1}),  # the "smallest"
        Resources({"cpu": 2000, "memory": 2**30, "pods": 1}),  # fits n1
    ]
    found = measure(free, allocatable=free, waiting=waiting)
    assert found.stranded["cpu"] == 0


# -- anonymising -----------------------------------------------------------------------------


def queue(name: str, parent: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"weight": 1}
    if parent:
        spec["parent"] = parent
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": spec,
    }


def test_volcano_root_queue_keeps_its_name() -> None:
    """core.queues.ROOT = "root" is interpreted; it is renamed like any queue."""
    out, _ = anonymise(document(queues=[queue("root"), queue("team-a", parent="root")]))
    names = {q["metadata"]["name"] for q in out["lists"]["queues"]}
    assert "root" in names
    assert all(q["spec"].get("parent") in (None, "root") for q in out["lists"]["queues"])


def pod(name: str, namespace: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"u-{namespace}-{name}"},
        "spec": {
            "schedulerName": "gang-scheduler",
            "serviceAccountName": "alice-payroll-sa",
            "containers": [{"name": "main"}],
        },
        "status": {"phase": "Pending", "podIP": "10.1.2.3", "hostIP": "10.20.30.40"},
    }


def test_tokens_keep_the_order_against_the_names_kept() -> None:
    """ "alpha" < "default" < "zeta", but tokens s1, s2 sort after "default": ties broken by
    namespace fall the other way once anonymised."""
    out, _ = anonymise(document(pods=[pod("p", "alpha"), pod("p", "default"), pod("p", "zeta")]))
    original = ["alpha", "default", "zeta"]
    renamed = [p["metadata"]["namespace"] for p in out["lists"]["pods"]]
    assert sorted(renamed) == renamed, (original, renamed)


def test_anonymised_snapshot_leaks_no_service_account_or_ip() -> None:
    out, _ = anonymise(document(pods=[pod("p", "payroll")]))
    text = json.dumps(out)
    assert "alice-payroll-sa" not in text
    assert "10.20.30.40" not in text


# -- the chart -------------------------------------------------------------------------------


def test_chart_integers_from_a_values_file_render_as_integers(tmp_path: Path) -> None:
    """A values file's numbers are float64 in helm: {{ . }} of 1000000 is "1e+06", which
    --kube-api-burst (type=int) refuses, so the scheduler exits at start."""
    import subprocess  # noqa: PLC0415

    from e2e.helm import CHART, helm_binary  # noqa: PLC0415

    values = tmp_path / "v.yaml"
    values.write_text("scheduling:\n  kubeApiBurst: 1000000\n")
    env = {"HELM_CACHE_HOME": str(tmp_path), "HELM_CONFIG_HOME": str(tmp_path),
           "HELM_DATA_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}  # fmt: skip
    out = subprocess.run(
        [str(helm_binary()), "template", "gs", str(CHART), "-n", "x", "-f", str(values)],
        capture_output=True, text=True, check=True, env=env, timeout=60,
    ).stdout  # fmt: skip
    assert "--kube-api-burst=1000000" in out


# -- the commands on hostile arguments and an absent API server (final read-through) ------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--hours", "-1"], "hours must be a positive number"),
        (["--jobs-per-hour", "nan"], "jobs per hour must be a positive number"),
        (["--duration-median", "0"], "duration median must be a positive number"),
        (["--diurnal-amplitude", "5"], "diurnal amplitude must be from 0 to 1"),
        (["--queues", "a=x"], "--queues takes NAME=SHARE"),
    ],
)
def test_a_hostile_trace_shape_is_an_error_that_names_it(
    tmp_path: Path, args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from scheduler.cli import main  # noqa: PLC0415

    assert main(["trace", "-o", str(tmp_path / "t.jsonl"), *args]) == 2
    assert said in capsys.readouterr().err


def test_a_snapshot_without_a_cluster_to_read_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No kubeconfig, and an API server that refuses the connection (nothing listens)."""
    from scheduler.cli import main  # noqa: PLC0415

    out = str(tmp_path / "s.json")
    assert main(["snapshot", "-o", out, "--kubeconfig", str(tmp_path / "absent")]) == 2
    assert "could not read the cluster" in capsys.readouterr().err
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    assert main(["snapshot", "-o", out, "--kubeconfig", str(config)]) == 2
    assert "could not read the cluster" in capsys.readouterr().err
    assert not Path(out).exists()
