"""The requests tests make of an API server, over one HTTP session (``pykube``'s), with
things named as kubectl names them (``pods``, ``podgroups.scheduling.x-k8s.io``).

A kubectl process costs 0.1-0.2 s of a 2-core machine, and such calls were 70% of an e2e
test's time and most of an oracle case's (session 38); the oracle and the e2e fixtures
share this one layer rather than each keeping its own."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

import pykube
import requests

CORE_RESOURCES = (
    "pods",
    "configmaps",
    "nodes",
    "namespaces",
    "events",
    "persistentvolumeclaims",
    "persistentvolumes",
)
# Resources named without their group, where the name is not a core one.
GROUPS = {"resourceslices": "resource.k8s.io", "deviceclasses": "resource.k8s.io",
          "resourceclaims": "resource.k8s.io", "storageclasses": "storage.k8s.io",
          "csidrivers": "storage.k8s.io", "csistoragecapacities": "storage.k8s.io"}  # fmt: skip


class RequestFailed(AssertionError):
    """The API server refused a request: its status and its own words. An AssertionError,
    so that in a test it reads as the test's failure."""


def api_base(api_version: str) -> str:
    """Where an API version is served: ``/api/v1``, ``/apis/scheduling.x-k8s.io/v1alpha1``."""
    return f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"


def is_ready(node: dict) -> bool:
    """Whether a node's Ready condition is True."""
    conditions = (node.get("status") or {}).get("conditions") or []
    return any((c.get("type"), c.get("status")) == ("Ready", "True") for c in conditions)


class Rest:
    """One API server's REST interface, for tests. Discovery answers (which version of a
    group serves a resource, which resource serves a kind) are kept once found, and only
    then: a kind a test installs later is looked up when first asked. A test that removes a
    CRD and installs it again at other versions needs a new Rest (none does: Volcano's comes
    back at the one version it had)."""

    def __init__(self, client: pykube.HTTPClient, *, timeout: float = 30.0) -> None:
        self.client = client
        self.timeout = timeout
        self._versions: dict[tuple[str, str], str] = {}
        self._resources: dict[tuple[str, str], str] = {}

    @property
    def url(self) -> str:
        return self.client.url

    @property
    def session(self) -> requests.Session:
        return self.client.session

    # where things are

    def path(self, resource: str, *, namespace: str = "") -> str:
        """The URL path of a collection named as kubectl names it (``pods``, ``nodes``,
        ``podgroups.scheduling.x-k8s.io``), at a version of its group that serves it."""
        name, _, group = resource.partition(".")
        if not group and name in CORE_RESOURCES:
            base = "/api/v1"
        else:
            base = "/apis/" + self.version_serving(group or GROUPS[name], name)
        return f"{base}/namespaces/{namespace}/{name}" if namespace else f"{base}/{name}"

    def version_serving(self, group: str, resource: str) -> str:
        """The group's version that serves ``resource``, its preferred one first: a group
        may prefer a version without it (scheduling.k8s.io prefers v1, PriorityClasses, and
        serves its PodGroups at v1alpha2 only). KeyError if none does."""
        if (group, resource) in self._versions:
            return self._versions[group, resource]
        answer = self.session.get(f"{self.url}/apis/{group}", timeout=self.timeout)
        if not answer.ok:
            raise KeyError(f"{group} is not served: {answer.status_code}")
        found = answer.json()
        versions = [found["preferredVersion"], *found["versions"]]
        for version in dict.fromkeys(v["groupVersion"] for v in versions):
            listed = self.session.get(f"{self.url}/apis/{version}", timeout=self.timeout)
            if listed.ok and any(r["name"] == resource for r in listed.json()["resources"]):
                self._versions[group, resource] = version
                return version
        raise KeyError(f"{group} serves no {resource}")

    def resource_of(self, api_version: str, kind: str) -> str:
        """The resource (``pods``, ``podgroups``) that serves ``kind`` at ``api_version``,
        from the API server's discovery."""
        if (api_version, kind) in self._resources:
            return self._resources[api_version, kind]
        answer = self.session.get(self.url + api_base(api_version), timeout=self.timeout)
        if not answer.ok:
            raise RequestFailed(f"{api_version} is not served: {answer.status_code}")
        for served in answer.json()["resources"]:
            if served["kind"] == kind and "/" not in served["name"]:
                self._resources[api_version, kind] = served["name"]
                return served["name"]
        raise RequestFailed(f"{api_version} serves no {kind}")

    def _object_url(self, obj: dict, *, named: bool) -> str:
        metadata, version = obj["metadata"], obj["apiVersion"]
        namespace = metadata.get("namespace")
        where = f"/namespaces/{namespace}" if namespace else ""
        name = f"/{metadata['name']}" if named else ""
        return (
            f"{self.url}{api_base(version)}{where}/{self.resource_of(version, obj['kind'])}{name}"
        )

    @staticmethod
    def _checked(answer: requests.Response, what: str) -> dict[str, Any]:
        if not answer.ok:
            raise RequestFailed(f"{what}: {answer.status_code} {answer.text.strip()}")
        return answer.json()

    # what is done

    def read(self, resource: str, name: str = "", *, namespace: str = "", **params: str) -> dict:
        """GET one object, or the list of a collection (``params``: ``labelSelector``,
        ``fieldSelector``); an answer other than 200 fails with the API server's words (a
        resource not served: KeyError)."""
        url = self.url + self.path(resource, namespace=namespace) + (f"/{name}" if name else "")
        answer = self.session.get(url, params=params, timeout=self.timeout)
        return self._checked(answer, f"GET {url}")

    def create(self, *objects: dict) -> None:
        """POST each object (as ``kubectl create``: one that exists fails)."""
        for obj in objects:
            answer = self.session.post(
                self._object_url(obj, named=False), json=obj, timeout=self.timeout
            )
            self._checked(answer, f"create {obj['kind']} {obj['metadata']['name']}")

    def apply(self, manifest: dict) -> None:
        """Create or update one object by server-side apply (as ``kubectl apply
        --server-side --force-conflicts``): the API server merges it, whatever its kind."""
        answer = self.session.patch(
            self._object_url(manifest, named=True),
            data=json.dumps(manifest),
            params={"fieldManager": "e2e", "force": "true"},
            headers={"Content-Type": "application/apply-patch+yaml"},
            timeout=self.timeout,
        )
        self._checked(answer, f"apply {manifest['kind']} {manifest['metadata']['name']}")

    def patch_status(self, resource: str, name: str, status: dict, *, namespace: str = "") -> None:
        """Merge ``status`` into an object's status subresource."""
        url = f"{self.url}{self.path(resource, namespace=namespace)}/{name}/status"
        answer = self.session.patch(
            url,
            data=json.dumps({"status": status}),
            headers={"Content-Type": "application/merge-patch+json"},
            timeout=self.timeout,
        )
        self._checked(answer, f"PATCH {url}")

    def remove(self, resource: str, name: str = "", *, namespace: str = "", **params: str) -> None:
        """DELETE one object, or every one of a collection that ``params`` select, without
        waiting for them to go; a clean-up, so a failure (a kind not served, say) is passed
        over, as ``kubectl delete ... --wait=false`` with ``check=False`` did."""
        with contextlib.suppress(requests.RequestException, KeyError, ValueError):
            path = self.path(resource, namespace=namespace) + (f"/{name}" if name else "")
            self.session.delete(self.url + path, params=params, timeout=self.timeout)

    def wait_ready(self, names: list[str], *, selector: str = "", timeout: float = 60.0) -> None:
        """Until every one of the nodes ``names`` (among those ``selector`` selects, one LIST
        a poll) is Ready: KWOK says so within a moment of a node's creation."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.read("nodes", labelSelector=selector)["items"]
            missing = set(names) - {n["metadata"]["name"] for n in found if is_ready(n)}
            if not missing:
                return
            if time.monotonic() > deadline:  # a test's failure, as wait_for's
                raise AssertionError(
                    f"timed out after {timeout:.0f}s waiting for nodes "
                    f"{', '.join(sorted(missing))} Ready"
                )
            time.sleep(0.05)
