"""What decoding a pod costs the scheduler (``pod_from_dict``), per pod and by its parts.

Every pod the scheduler sees goes through ``pod_from_dict``: 5,000 of them in the first
LIST before the first bind (36-39 ms a page of 1,000, session 33's first-bind.md), and again
at every watch update (a bind, a status write, an annotation). The pods here are as a
v1.36 API server returns the bench's workloads (defaulted fields, the admission's two
tolerations, one managedFields entry): a gang by Koordinator's annotations, a gang by the
scheduler-plugins label, a Job's pod (its gang found from its owner), and a pod of no gang.

    python -m bench.decode            # writes bench/results/decode.{json,md}

A figure is the best of ``--repeat`` passes over ``--pods`` pods of a shape (the least
disturbed by the machine), in microseconds a pod; compare figures of one run, or the best of
runs alternated (before and after a change).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
import uuid
from collections.abc import Callable

from bench.report import table, write
from scheduler.codecs.objects import pod_from_dict, pod_gang, pod_requests
from scheduler.codecs.selectors import tolerations
from scheduler.codecs.shapes import texts
from scheduler.model import names

SCHEDULER = "gang-scheduler"


def api_pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owner: dict | None = None,
) -> dict:
    """A pending pod as the API server returns it: what the bench creates, defaulted."""
    meta: dict = {
        "name": name,
        "namespace": "bench",
        "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, name)),
        "resourceVersion": "123456",
        "creationTimestamp": "2026-11-28T04:00:00Z",
        "labels": dict(labels or {}),
        "annotations": dict(annotations or {}),
        "managedFields": [
            {"manager": "python-requests", "operation": "Update", "apiVersion": "v1",
             "time": "2026-11-28T04:00:00Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:annotations": {}}, "f:spec": {"f:containers": {}}}}
        ],
    }  # fmt: skip
    if owner:
        meta["ownerReferences"] = [owner]
    spec = {
        "schedulerName": SCHEDULER,
        "containers": [
            {"name": "main", "image": "registry.k8s.io/pause:3.10",
             "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
             "terminationMessagePath": "/dev/termination-log",
             "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}
        ],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
             "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
             "effect": "NoExecute", "tolerationSeconds": 300},
        ],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }  # fmt: skip
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def shapes(count: int) -> dict[str, list[dict]]:
    """``count`` pods of each shape, in gangs of 8."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j-uid",
           "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    return {
        "Koordinator's annotations": [
            api_pod(
                f"k-{i}",
                annotations={names.KOORD_NAME: f"g{i // 8}", names.KOORD_MIN_AVAILABLE: "8"},
            )
            for i in range(count)
        ],
        "scheduler-plugins' label": [
            api_pod(f"s-{i}", labels={names.POD_GROUP_LABEL: f"g{i // 8}"}) for i in range(count)
        ],
        "a Job's pod": [
            api_pod(
                f"j-{i}",
                labels={
                    "batch.kubernetes.io/job-name": "train",
                    "batch.kubernetes.io/job-completion-index": str(i),
                },
                annotations={"batch.kubernetes.io/job-completion-index": str(i)},
                owner=job,
            )
            for i in range(count)
        ],
        "no gang": [api_pod(f"p-{i}") for i in range(count)],
    }


def one_pass(work: Callable[[dict], object], pods: list[dict]) -> float:
    """Seconds for one pass of ``work`` over ``pods``."""
    started = time.perf_counter()
    for pod in pods:
        work(pod)
    return time.perf_counter() - started


def _gang(pod: dict) -> object:
    """What ``pod_from_dict`` does for the gang, its labels and annotations read first."""
    meta = pod["metadata"]
    labels, annotations = texts(meta.get("labels")), texts(meta.get("annotations"))
    return pod_gang(
        meta, pod["spec"], labels=labels, annotations=annotations, namespace=meta["namespace"]
    )


PARTS: dict[str, Callable[[dict], object]] = {
    "pod_from_dict": pod_from_dict,
    "the gang (labels and annotations read)": _gang,
    "tolerations": lambda pod: tolerations(pod["spec"].get("tolerations")),
    "pod_requests": lambda pod: pod_requests(pod["spec"]),
    "json.loads of the pod": None,  # filled in run(): the decoder's own share, for scale
}


def run(*, pods: int, repeat: int) -> dict:
    """The best of ``repeat`` rounds, each a pass of every part over every shape: this
    machine's speed moves by up to 2x from one second to the next (a host's other guests),
    so each figure's passes are spread over the whole run rather than taken in one go; and
    without the garbage collector, as ``timeit`` does (its passes over the pods held here
    were noise of their own)."""
    works: dict[str, dict[str, tuple[Callable[[dict], object], list]]] = {}
    for shape, items in shapes(pods).items():
        encoded = [json.dumps(p) for p in items]
        works[shape] = {
            part: (work, items) if work is not None else (json.loads, encoded)  # type: ignore[misc]
            for part, work in PARTS.items()
        }
    best = {shape: dict.fromkeys(PARTS, float("inf")) for shape in works}
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeat):
            for shape, parts in works.items():
                for part, (work, items) in parts.items():
                    best[shape][part] = min(best[shape][part], one_pass(work, items))
    finally:
        gc.enable()
    figures = {
        shape: {part: round(seconds / pods * 1e6, 2) for part, seconds in row.items()}
        for shape, row in best.items()
    }
    return {
        "pods": pods,
        "repeat": repeat,
        "python": platform.python_version(),
        "figures_us_per_pod": figures,
    }


def markdown(results: dict) -> str:
    parts = list(PARTS)
    lines = [
        "# Decoding a pod (`python -m bench.decode`)",
        "",
        f"Microseconds a pod, the best of {results['repeat']} passes over {results['pods']} "
        f"pods of each shape (Python {results['python']}); see `bench/decode.py` for the "
        "pods. Figures of one run compare; absolute ones move with the machine.",
        "",
        *table(
            ["pods", *parts],
            (
                [shape, *(f"{row[p]:.1f}" for p in parts)]
                for shape, row in results["figures_us_per_pod"].items()
            ),
        ),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.decode", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    results = run(pods=args.pods, repeat=args.repeat)
    text = markdown(results)
    print(text)
    if not args.no_write:
        write("decode", results, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
