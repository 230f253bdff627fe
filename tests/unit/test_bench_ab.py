"""An A/B run of the bench: an earlier checkout of ours (GANG_SCHEDULER_BASE) runs beside
this one when asked for by name, from its own directory, and never in a run that does not
ask for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.schedulers import BASE_CHECKOUT, ClientLimits, PeerMissing, contenders

LIMITS = ClientLimits(qps=100, burst=100, bind_concurrency=4)


def test_a_run_that_does_not_name_the_base_never_starts_it(tmp_path: Path) -> None:
    keys = [c.key for c in contenders(kubeconfig=tmp_path / "k", workdir=tmp_path, limits=LIMITS,
                                      build=False, only=frozenset({"gang_scheduler"}))]  # fmt: skip
    assert keys == ["gang_scheduler"]


def test_the_base_without_a_checkout_says_what_to_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(BASE_CHECKOUT, raising=False)
    with pytest.raises(PeerMissing, match=BASE_CHECKOUT):
        contenders(kubeconfig=tmp_path / "k", workdir=tmp_path, limits=LIMITS, build=False,
                   only=frozenset({"gang_scheduler_base"}))  # fmt: skip


def test_the_base_runs_its_own_package_from_its_own_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = tmp_path / "base"
    (checkout / "scheduler").mkdir(parents=True)
    (checkout / "scheduler" / "__init__.py").write_text("")
    monkeypatch.setenv(BASE_CHECKOUT, str(checkout))
    (base,) = contenders(kubeconfig=tmp_path / "k", workdir=tmp_path, limits=LIMITS,
                         build=False, only=frozenset({"gang_scheduler_base"}))  # fmt: skip
    assert (base.key, base.cwd) == ("gang_scheduler_base", checkout.resolve())
    assert base.label.startswith("gang-scheduler at ")
    assert base.argv[1:4] == ("-m", "scheduler", "run")
