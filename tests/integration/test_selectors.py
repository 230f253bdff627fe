"""Label selectors in kubectl's syntax (a Queue's ``gang-scheduler.io/namespace-selector``)
read as the API server reads them: for each selector, the namespaces the API server lists
with ``?labelSelector=`` are those ours matches, and a selector the API server refuses (400)
is one ours calls malformed."""

from __future__ import annotations

import asyncio
import urllib.parse

import pytest

from e2e.fixtures import Cluster
from scheduler.codecs.selectors import parse_selector
from scheduler.core.filtering import selector_matches
from scheduler.shell.api import ApiClient, ApiError, load_credentials

pytestmark = pytest.mark.cluster

LABELS = {
    "a": {"team": "a", "tier": "gold", "size": "4"},
    "b": {"team": "b", "tier": ""},
    "c": {"example.com/team": "a"},
    "d": {},
}
SELECTORS = [
    "team=a", "team==a", "team!=a", "team = a", "team in (a,b)", "team in (a, b)",
    "team notin (a)", "team", "!team", "team,tier", "team=a,tier=gold", "tier=", "tier in ()",
    "example.com/team=a", "size>3", "size<3", "size>x", "team=a,", ",team", "=a", "team=a=b",
    "!team=a", "team in a", "team in (a", "bad key", "-team", "Team.IO/x=a", "team=-a",
    "team=" + "x" * 63, "team=" + "x" * 64, "k" * 63, "k" * 64, "", "team in (a,,b)",
    "team notin (a),!tier", "team != a", "a/b/c=d", "tier in (,a)", "tier in (a,)", "team in (a b)",
    "team in (a", "team notin ()", "team in (=)",
]  # fmt: skip


async def _served(cluster: Cluster, selector: str) -> set[str] | None:
    api = ApiClient(load_credentials(str(cluster.access.kubeconfig)))
    try:
        query = urllib.parse.urlencode({"labelSelector": selector})
        listed = await api.request("GET", f"/api/v1/namespaces?{query}")
    except ApiError as error:
        if error.status == 400:
            return None
        raise
    finally:
        await api.close()
    return {item["metadata"]["name"] for item in listed.get("items", [])}


def test_our_selectors_select_the_namespaces_the_api_server_selects(cluster: Cluster) -> None:
    names = {key: f"{cluster.namespace}-sel-{key}" for key in LABELS}
    cluster.apply(*(
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": names[key], "labels": labels}}
        for key, labels in LABELS.items()
    ))  # fmt: skip
    ours_ns = set(names.values())
    disagreements = []
    try:
        for selector in SELECTORS:
            served = asyncio.run(_served(cluster, selector))
            parsed, error = parse_selector(selector)
            if served is None or error:
                if (served is None) != bool(error):
                    disagreements.append(
                        f"{selector!r}: API server {'refuses' if served is None else 'takes'} "
                        f"it, ours {'refuses' if error else 'takes'} it ({error})"
                    )
                continue
            mine = {names[k] for k, labels in LABELS.items() if selector_matches(parsed, labels)}
            if served & ours_ns != mine:
                disagreements.append(f"{selector!r}: API server {served & ours_ns}, ours {mine}")
    finally:
        for name in names.values():
            cluster.access.kubectl("delete", "namespace", name, "--wait=false", check=False)
    assert not disagreements, "\n".join(disagreements)
