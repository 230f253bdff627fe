"""Kubeconfigs read without the kubernetes library (its import costs a fifth of a second at
start) must give the credentials the library's loader gives, and anything else must be
left to that loader."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from scheduler.shell.api import (
    Credentials,
    _library_kubeconfig,
    _plain_kubeconfig,
    load_credentials,
)


def write(tmp_path: Path, *, cluster: dict, user: dict) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "other", "cluster": {"server": "https://elsewhere"}},
                     {"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }  # fmt: skip
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def seen(credentials: Credentials) -> tuple:
    """What the credentials amount to: the files' contents, not their (temporary) names."""

    def content(name: str | None) -> bytes | None:
        return Path(name).read_bytes() if name else None

    return (
        credentials.server,
        content(credentials.ca_file) if credentials.verify else None,
        content(credentials.cert_file),
        content(credentials.key_file),
        credentials.bearer(),
        credentials.verify,
    )


def b64(data: bytes) -> str:
    return base64.standard_b64encode(data).decode()


@pytest.mark.parametrize(
    ("cluster", "user"),
    [
        (
            {"server": "https://127.0.0.1:6443/", "certificate-authority": "ca.crt"},
            {"client-certificate": "admin.crt", "client-key": "admin.key"},
        ),
        (
            {"server": "https://api:6443", "certificate-authority-data": b64(b"CA")},
            {"client-certificate-data": b64(b"CERT"), "client-key-data": b64(b"KEY")},
        ),
        ({"server": "https://api", "certificate-authority": "ca.crt"}, {"token": "s3cret"}),
        ({"server": "https://api", "insecure-skip-tls-verify": True}, {"token": "s3cret"}),
    ],
)
def test_a_plain_kubeconfig_reads_as_the_library_reads_it(
    tmp_path: Path, cluster: dict, user: dict
) -> None:
    for name, data in (("ca.crt", b"CA"), ("admin.crt", b"CERT"), ("admin.key", b"KEY")):
        (tmp_path / name).write_bytes(data)
    path = write(tmp_path, cluster=cluster, user=user)
    ours = _plain_kubeconfig(path)
    assert ours is not None
    assert seen(ours) == seen(_library_kubeconfig(path))
    assert seen(load_credentials(path)) == seen(ours)


@pytest.mark.parametrize(
    "user",
    [
        {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "get-token"}},
        {"auth-provider": {"name": "oidc", "config": {}}},
        {"tokenFile": "/var/run/token"},
        {"username": "admin", "password": "admin"},
    ],
)
def test_anything_else_is_left_to_the_library(tmp_path: Path, user: dict) -> None:
    assert _plain_kubeconfig(write(tmp_path, cluster={"server": "https://api"}, user=user)) is None


def test_a_missing_or_broken_kubeconfig_is_left_to_the_library(tmp_path: Path) -> None:
    assert _plain_kubeconfig(str(tmp_path / "absent")) is None
    (tmp_path / "broken").write_text("current-context: nowhere\n")
    assert _plain_kubeconfig(str(tmp_path / "broken")) is None


@pytest.mark.parametrize(
    "cluster",
    [
        {"server": "https://api", "insecure-skip-tls-verify": "false"},  # the library: truthy
        {"server": "https://api", "certificate-authority-data": "not base64!"},
        {"server": "https://api", "proxy-url": "http://proxy:3128"},
    ],
)
def test_a_cluster_entry_read_otherwise_is_left_to_the_library(
    tmp_path: Path, cluster: dict
) -> None:
    assert _plain_kubeconfig(write(tmp_path, cluster=cluster, user={"token": "t"})) is None
