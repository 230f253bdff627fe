"""gang-scheduler snapshot / simulate / trace (#26 part 4), without an API server: the trace
generator's determinism and shape, a report from a tiny snapshot and trace (its sections,
its PNGs, the same twice), --compare of pack and spread, anonymising that keeps the core's
decisions and hides what it must, and the traces, snapshots and arguments each refuses."""

from __future__ import annotations

import calendar
import json
import math
import signal
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from scheduler.cli import main
from scheduler.core.scheduling import schedule
from scheduler.model import names
from scheduler.model.config import Config
from scheduler.shell import snapshotting
from scheduler.shell.snapshotting import API_VERSION, KIND, fold
from scheduler.sim import traces
from scheduler.sim.anonymising import anonymise
from scheduler.sim.reporting import quantile, summary
from scheduler.sim.simulating import Setup, _start_time, simulate
from scheduler.sim.traces import Job, Shape, generate

GPU = "nvidia.com/gpu"


def node(name: str, *, rack: str, gpus: int = 8) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "example.com/rack": rack},
        },
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [
                {"type": "InternalIP", "address": "10.20.30.40"},
                {"type": "Hostname", "address": name},
            ],
        },
    }


def document(nodes: int = 4, **lists: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"takenAt": "2026-01-01T00:00:00Z"},
        "unserved": [],
        "lists": {"nodes": [node(f"gpu-{i}", rack=f"rack-{i // 2}") for i in range(nodes)]} | lists,
    }


# -- the trace generator ------------------------------------------------------------------


def test_the_generator_is_deterministic_and_seeded() -> None:
    shape = Shape(hours=12, jobs_per_hour=30, queues=(("a", 2), ("b", 1)))
    assert generate(seed=5, shape=shape) == generate(seed=5, shape=shape)
    assert generate(seed=5, shape=shape) != generate(seed=6, shape=shape)


def test_generated_traces_have_the_published_shape() -> None:
    """Sizes mostly 1 GPU and powers of two, a heavy-tailed log-normal duration, diurnal
    arrivals: ten days of 40 jobs an hour (about 9,600 jobs)."""
    shape = Shape(hours=240, jobs_per_hour=40)
    jobs = generate(seed=11, shape=shape)
    assert 9000 < len(jobs) < 10200
    sizes = [job.gpus for job in jobs]
    assert set(sizes) <= {1, 2, 4, 8, 16, 32, 64}
    assert abs(sizes.count(1) / len(sizes) - 0.60) < 0.03
    assert all(job.gpu <= 8 and job.members * job.gpu == job.gpus for job in jobs)
    durations = sorted(job.duration for job in jobs)
    median = statistics.median(durations)
    assert abs(median / shape.duration_median - 1) < 0.1
    p99 = durations[int(0.99 * len(durations))]
    # log-normal: p99 / median = e^(2.326 sigma), about 41 at sigma 1.6
    assert 25 < p99 / median < 70
    assert statistics.fmean(durations) > 2 * median  # the mean is pulled by the tail
    hour_of = [(job.at / 3600) % 24 for job in jobs]
    peak = sum(1 for h in hour_of if 12 <= h < 16)
    trough = sum(1 for h in hour_of if 0 <= h < 4)
    # rate 1 + 0.5 cos: about 1.46 around the peak, 0.54 around the trough
    assert 2.2 < peak / trough < 3.4


def test_traces_round_trip_as_json_lines_and_csv(tmp_path: Path) -> None:
    jobs = generate(seed=2, shape=Shape(hours=2, queues=(("a", 1),)))
    for name in ("t.jsonl", "t.csv"):
        traces.write(jobs, tmp_path / name)
        assert traces.read(tmp_path / name) == jobs


def test_a_bad_trace_says_where(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"at": 0, "name": "a", "members": 1, "gpu": 1}\n{"at": 1, "name": "b"}\n')
    with pytest.raises(ValueError, match=r"t.jsonl:2: members is required"):
        traces.read(path)


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
    """NaN passes `duration <= 0` and `at < 0`: a gang that never ended (NaN <= t is False)
    or never arrived would keep simulate without --until looping for ever. The line that
    says it is refused, by its number."""
    path = tmp_path / "t.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=r"t\.jsonl:1"):
        traces.read(path)


@pytest.mark.parametrize("line", ["3", "null", "[1, 2]", "true"])
def test_a_trace_line_that_is_not_an_object_is_a_value_error(tmp_path: Path, line: str) -> None:
    """The CLI catches ValueError only: a line that is JSON but not an object is a
    ValueError naming the line, not a TypeError traceback (set(3), set(None))."""
    path = tmp_path / "t.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=r"t\.jsonl:1"):
        traces.read(path)


# -- simulate -----------------------------------------------------------------------------


def tiny_trace() -> list[Job]:
    """Four single-GPU jobs, a pass apart, then a gang of two whole nodes: pack leaves three
    nodes whole and starts it at once; spread puts one job on each node and it waits."""
    small = [
        Job(at=5 * i, name=f"small-{i}", members=1, gpu=1, duration=600, queue="a")
        for i in range(4)
    ]
    return [*small, Job(at=30, name="big", members=2, gpu=8, duration=300, queue="a")]


def write_inputs(tmp_path: Path) -> tuple[Path, Path]:
    snap, trace = tmp_path / "snap.json", tmp_path / "trace.jsonl"
    snap.write_text(json.dumps(document()))
    traces.write(tiny_trace(), trace)
    (tmp_path / "pack.yaml").write_text("name: pack\nscoring: pack\n")
    (tmp_path / "spread.yaml").write_text("name: spread\nscoring: spread\n")
    return snap, trace


def test_simulate_writes_a_report_with_its_sections_and_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap, trace = write_inputs(tmp_path)
    assert main(["simulate", str(snap), str(trace), "-o", str(tmp_path / "out")]) == 0
    report = (tmp_path / "out" / "report.md").read_text()
    for section in (
        "## Summary",
        "## Utilisation over time",
        "## Gang wait",
        "## Fragmentation over time",
        "## Preemptions and reclaims",
        "## Queue shares against their ideal",
    ):
        assert section in report
    for figure in ("utilisation", "waits", "fragmentation", "preemptions", "shares"):
        png = tmp_path / "out" / f"{figure}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", figure
        assert f"({figure}.png)" in report
    assert "| jobs finished | 5 |" in report
    assert "| 1 GPU | 4 |" in report
    assert "| 9-32 GPUs | 1 |" in report


def test_simulate_is_deterministic(tmp_path: Path) -> None:
    snap, trace = write_inputs(tmp_path)
    outs = []
    for name in ("one", "two"):
        assert main(["simulate", str(snap), str(trace), "-o", str(tmp_path / name)]) == 0
        outs.append(tmp_path / name)
    for item in sorted(p.name for p in outs[0].iterdir()):
        assert (outs[0] / item).read_bytes() == (outs[1] / item).read_bytes(), item


def test_compare_shows_both_setups_and_packing_keeps_nodes_whole(tmp_path: Path) -> None:
    snap, trace = write_inputs(tmp_path)
    args = ["simulate", str(snap), str(trace), "-o", str(tmp_path / "out"), "--compare"]
    assert main([*args, str(tmp_path / "pack.yaml"), str(tmp_path / "spread.yaml")]) == 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert report.startswith("# Simulation: pack vs spread")
    assert "|  | pack | spread |" in report
    assert "| size | gangs (pack) | p50 s (pack) | p99 s (pack) | gangs (spread) |" in report
    # The same trace and cluster played twice, directly: the big gang waits under spread.
    runs = {
        scoring: summary(
            simulate(
                json.loads(snap.read_text()),
                traces.read(trace),
                setup=Setup(name=scoring, config=Config(scoring=scoring)),
            )
        )
        for scoring in ("pack", "spread")
    }
    assert runs["pack"]["gang wait p99 (s)"] == 0
    assert runs["spread"]["gang wait p99 (s)"] >= 570  # until the small jobs end
    assert (
        runs["pack"]["whole free GPU nodes (mean)"] > runs["spread"]["whole free GPU nodes (mean)"]
    )


def test_queue_overrides_and_topology_off_are_applied(tmp_path: Path) -> None:
    (tmp_path / "w.yaml").write_text("name: heavy-b\nqueues: {b: {weight: 3}}\ntopology: false\n")
    from scheduler.sim.simulating import load_setup, prepare  # noqa: PLC0415

    setup = load_setup(tmp_path / "w.yaml")
    assert setup.name == "heavy-b"
    assert not setup.topology
    doc = prepare(document(topologies=[{"metadata": {"name": "t"}}]), tiny_trace(), setup)
    assert doc["lists"]["topologies"] == []
    queues = {q["metadata"]["name"]: q["spec"] for q in doc["lists"]["queues"]}
    assert queues == {"a": {"weight": 1}, "b": {"weight": 3}}
    (tmp_path / "bad.yaml").write_text("scorring: pack\n")
    with pytest.raises(ValueError, match="unknown setting"):
        load_setup(tmp_path / "bad.yaml")


class _Hang(Exception):
    pass


@pytest.fixture
def deadline():
    """A simulation that does not end in 10 s raises _Hang, rather than hanging the run."""

    def fire(*_: object) -> None:
        raise _Hang("the simulation did not end")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def test_simulate_rejects_a_step_of_zero(deadline: None) -> None:
    """--step 0 (or negative) is refused: t would never advance while a gang waits (a
    hang), and with nothing waiting _next_time would divide by it (ZeroDivisionError)."""
    jobs = [Job(at=0, name="a", members=1, gpu=8, duration=100)]
    with pytest.raises(ValueError, match="--step must be a positive number"):
        simulate(document(nodes=1), jobs, step=0)


def test_a_nan_duration_is_refused_rather_than_never_ending(deadline: None) -> None:
    jobs = [Job(at=0, name="a", members=1, gpu=1, duration=float("nan"))]
    with pytest.raises(ValueError, match="finite"):
        simulate(document(nodes=1), jobs, step=5)  # run for ever, the deadline would raise


def test_a_trace_job_named_like_a_retry_does_not_collide(deadline: None) -> None:
    """An evicted job "a" comes back as gang "a-r1": a trace job named "a-r1" stays a gang
    of its own, its members, job_of and pod uids not overwritten by the retry's."""
    jobs = [
        Job(at=0, name="a", members=1, gpu=8, duration=1000, priority=0),
        Job(at=10, name="b", members=1, gpu=8, duration=100, priority=1000),
        Job(at=20, name="a-r1", members=1, gpu=8, duration=50, priority=0),
    ]
    run = simulate(document(nodes=1), jobs, step=5)
    started = [w[0] for w in run.waits]
    assert run.preempted[-1] >= 1, "the setup must preempt a for this test to say anything"
    # Every job of the trace finishes once ("a" after its retry): none is lost.
    assert run.finished == 3, (run.finished, run.waits)
    assert started.count("a") == 2
    assert "a-r1" in started


def test_the_start_time_is_utc_whatever_the_time_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The snapshot's takenAt is read as UTC, not by time.mktime(...) - time.timezone, an
    hour off in summer time (DST): the same snapshot plays the same in every zone."""
    monkeypatch.setenv("TZ", "Europe/London")
    time.tzset()
    try:
        doc = {"metadata": {"takenAt": "2026-07-01T00:00:00Z"}}
        assert _start_time(doc) == calendar.timegm((2026, 7, 1, 0, 0, 0))
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_the_nearest_rank_median_of_two_is_the_lower() -> None:
    """Nearest rank: the ceil(q*n)-th value; int(q*n) would be one past it whenever q*n is
    whole (p50 of [1, 100] would be 100, p99 of 100 values the maximum)."""
    assert quantile([1, 100], 0.5) == 1
    assert quantile(list(range(1, 101)), 0.99) == 99


def test_the_trace_command_writes_a_trace(tmp_path: Path) -> None:
    out = tmp_path / "t.csv"
    assert main(["trace", "-o", str(out), "--seed", "4", "--hours", "3", "--queues", "x=1"]) == 0
    jobs = traces.read(out)
    assert jobs == generate(seed=4, shape=Shape(hours=3, queues=(("x", 1.0),)))
    assert {job.queue for job in jobs} == {"x"}


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
    assert main(["trace", "-o", str(tmp_path / "t.jsonl"), *args]) == 2
    assert said in capsys.readouterr().err


# -- snapshots ----------------------------------------------------------------------------


def test_a_snapshot_that_is_neither_json_nor_yaml_is_a_value_error(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{"kind": "ClusterSnapshot", : [\n')
    with pytest.raises(ValueError, match="neither JSON nor YAML"):
        snapshotting.read(path)


def test_a_snapshot_without_a_cluster_to_read_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No kubeconfig, and an API server that refuses the connection (nothing listens)."""
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


# -- anonymising --------------------------------------------------------------------------


def rich_document() -> dict[str, Any]:
    """Queues in a tree, a PodGroup with its queue, pods by its label, a Koordinator gang
    by annotation, a nodeSelector on a rack, a PriorityClass, the topology ConfigMap."""
    ns = "team-secret"
    tree = {f"rack-{r}": {f"gpu-{2 * r + i}": {} for i in range(2)} for r in range(2)}

    def pod(name: str, *, labels: dict, annotations: dict | None = None, **spec: Any) -> dict:
        return {
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),  # random-looking, as real ones
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": labels,
                "annotations": annotations or {},
            },
            "spec": {
                "schedulerName": "gang-scheduler",
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example.com/secret/model:1",
                        "resources": {"requests": {GPU: "4", "cpu": "8"}},
                    }
                ],
                **spec,
            },
            "status": {"phase": "Pending"},
        }

    pods = [
        pod(f"trainer-{i}", labels={names.POD_GROUP_LABEL: "llm-train"}, priorityClassName="hi")
        for i in range(3)
    ]
    pods += [
        pod(
            f"koord-{i}",
            labels={names.QUEUE: "secret-research"},
            annotations={names.KOORD_NAME: "koord-gang", names.KOORD_MIN_AVAILABLE: "2"},
            nodeSelector={"example.com/rack": "rack-1"},
        )
        for i in range(2)
    ]
    return document(
        pods=pods,
        podgroups=[
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "llm-train", "namespace": ns, "uid": "uid-pg"},
                "spec": {"minMember": 3, "queue": "secret-prod"},
            }
        ],
        queues=[
            {"metadata": {"name": "org-secret", "uid": "q0"}, "spec": {"weight": 1}},
            {
                "metadata": {"name": "secret-prod", "uid": "q1"},
                "spec": {"parent": "org-secret", "weight": 2},
            },
            {
                "metadata": {"name": "secret-research", "uid": "q2"},
                "spec": {"parent": "org-secret", "weight": 1},
            },
        ],
        priorityclasses=[{"metadata": {"name": "hi"}, "value": 1000}],
        topologies=[
            {
                "metadata": {
                    "name": "cluster-topology",
                    "namespace": "gang-scheduler-system",
                    "labels": {names.SAKKARA_TOPOLOGY: "true"},
                },
                "data": {
                    "level-names": '["rack", "node"]',
                    "tree": json.dumps(tree),
                    "resource-names": '["nvidia.com/gpu"]',
                },
            }
        ],
    )


def bind_map(doc: dict[str, Any]) -> dict[str, str]:
    cache = fold(doc, config=Config())
    result = schedule(cache.snapshot(whole=True), now=1.8e9, config=Config())
    return {
        b.pod.name: b.node for group in result.bindings for g in group.gangs for b in g.bindings
    }


def test_anonymising_keeps_the_decisions_renamed() -> None:
    doc = rich_document()
    before = bind_map(doc)
    assert len(before) == 5  # both gangs placed, the Koordinator one on rack-1
    assert {before["koord-0"], before["koord-1"]} <= {"gpu-2", "gpu-3"}
    hidden, mapping = anonymise(doc)
    after = bind_map(hidden)
    assert after == {mapping[pod]: mapping[node] for pod, node in before.items()}
    text = json.dumps(hidden)
    for secret in ("team-secret", "llm-train", "secret-prod", "org-secret", "koord-gang",
                   "rack-1", "gpu-0", "trainer-0", "registry.example.com", '"hi"'):  # fmt: skip
        assert secret not in text, secret
    # What gang membership, queues and topology rely on is still there, renamed.
    kept = hidden["lists"]
    assert kept["pods"][0]["metadata"]["labels"] == {names.POD_GROUP_LABEL: mapping["llm-train"]}
    assert kept["podgroups"][0]["spec"]["queue"] == mapping["secret-prod"]
    assert kept["topologies"][0]["metadata"]["labels"] == {names.SAKKARA_TOPOLOGY: "true"}
    assert mapping["rack-1"] in json.loads(kept["topologies"][0]["data"]["tree"])
    assert kept["nodes"][0]["status"]["allocatable"][GPU] == "8"
    assert all(token not in mapping for token in mapping.values())  # no original reused
    # The tokens keep the originals' order: ties broken by name fall the same way.
    assert sorted(mapping) == sorted(mapping, key=mapping.__getitem__)


def test_anonymised_snapshots_simulate_the_same() -> None:
    doc = rich_document()
    hidden, _ = anonymise(doc)
    jobs = tiny_trace()
    plain, renamed = simulate(doc, jobs), simulate(hidden, jobs)
    assert summary(plain) == summary(renamed)
    assert math.isclose(sum(plain.gpu_util), sum(renamed.gpu_util))


def volcano_queue(name: str, parent: str | None = None) -> dict[str, Any]:
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
    """Volcano's root queue ("root", core.queues.ROOT) means something to the core: it is
    not renamed like other queues, and its children still name it as their parent."""
    out, _ = anonymise(
        document(nodes=1, queues=[volcano_queue("root"), volcano_queue("team-a", parent="root")])
    )
    queue_names = {q["metadata"]["name"] for q in out["lists"]["queues"]}
    assert "root" in queue_names
    assert all(q["spec"].get("parent") in (None, "root") for q in out["lists"]["queues"])


def pending_pod(name: str, namespace: str) -> dict[str, Any]:
    """A pending pod with what says whose it is and where: a service account, IPs."""
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
    """ "alpha" < "default" < "zeta", and "default" is kept: the tokens of the others keep
    their order against it (tokens s1, s2 would sort after "default"), so ties broken by
    namespace fall the same way once anonymised."""
    pods = [pending_pod("p", "alpha"), pending_pod("p", "default"), pending_pod("p", "zeta")]
    out, _ = anonymise(document(nodes=1, pods=pods))
    original = ["alpha", "default", "zeta"]
    renamed = [p["metadata"]["namespace"] for p in out["lists"]["pods"]]
    assert sorted(renamed) == renamed, (original, renamed)


def test_anonymised_snapshot_leaks_no_service_account_or_ip() -> None:
    out, _ = anonymise(document(nodes=1, pods=[pending_pod("p", "payroll")]))
    text = json.dumps(out)
    assert "alice-payroll-sa" not in text
    assert "10.20.30.40" not in text
