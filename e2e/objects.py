"""pykube kinds for the custom resources the tests and tools create."""

from __future__ import annotations

import json

import pykube


class PodGroup(pykube.objects.NamespacedAPIObject):
    version = "scheduling.x-k8s.io/v1alpha1"
    endpoint = "podgroups"
    kind = "PodGroup"


def bind(api: pykube.HTTPClient, *, namespace: str, pod: str, node: str) -> None:
    """POST a Binding, as a scheduler does: the pod's nodeName is set by the API server."""
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod, "namespace": namespace},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    response = api.post(
        url=f"pods/{pod}/binding", namespace=namespace, version="v1", data=json.dumps(body)
    )
    response.raise_for_status()
