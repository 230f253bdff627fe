"""make test starts its tests while the Go builds run (e2e/awaiting_builds.py): the unit tests
first, the others once the control plane is built, the ``tools`` ones once the tools are. Each
case runs a real pytest on a small tree of tests, with the builds' status files written by a
thread as e2e/run-tests.sh's background build writes them."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from e2e.awaiting_builds import BUILDS_VARIABLE, BackgroundBuild

REPO = Path(__file__).resolve().parent.parent.parent

CONFTEST = 'pytest_plugins = ["e2e.awaiting_builds"]\n'
# Each test appends its name to a file, so the order they ran in can be read back, and says
# which builds had ended when it ran.
RECORDING = """
import os, pathlib
def record(name):
    ended = sorted(p.stem for p in pathlib.Path(os.environ["RECORD_BUILDS"]).glob("*.status"))
    with open(os.environ["ORDER_FILE"], "a") as f:
        f.write(f"{name} {','.join(ended) or '-'}\\n")
"""
# pytest-timeout's bound for every test is 1 s, far below the builds' time: the waits must
# not count against it.
INI = """[pytest]
markers =
    tools: needs the tools
timeout = 1
"""


def _tree(root: Path) -> None:
    (root / "tests" / "unit").mkdir(parents=True)
    (root / "e2e").mkdir()
    (root / "pytest.ini").write_text(INI)
    (root / "conftest.py").write_text(CONFTEST)
    (root / "recording.py").write_text(RECORDING)
    (root / "e2e" / "test_against_the_api.py").write_text(
        "import pytest\nfrom recording import record\n"
        "@pytest.mark.tools\ndef test_with_helm(): record('helm')\n"
        "def test_gangs(): record('gangs')\n"
    )
    (root / "tests" / "unit" / "test_core.py").write_text(
        "from recording import record\ndef test_core(): record('core')\n"
    )


def _end_after(builds: Path, order: Path, *, after: dict[str, str], status: dict[str, str]) -> None:
    """Each build ends a second after the test ``after[build]`` names has run (so the tests
    after it find it still running, however slowly the inner pytest starts)."""

    def ran(test: str) -> bool:
        return order.exists() and any(
            line.split()[0] == test for line in order.read_text().splitlines()
        )

    def end() -> None:
        for name, test in after.items():
            deadline = time.monotonic() + 60
            while not ran(test) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.0)
            (builds / f"{name}.log").write_text(f"building {name}\nthe last line of {name}\n")
            (builds / f"{name}.status").write_text(status.get(name, "0") + "\n")

    threading.Thread(target=end, daemon=True).start()


def _pytest(root: Path, builds: Path, *, background: bool) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": f"{root}{os.pathsep}{REPO}",
        "ORDER_FILE": str(root / "order"),
        "RECORD_BUILDS": str(builds),
    }
    env.pop(BUILDS_VARIABLE, None)
    if background:
        env[BUILDS_VARIABLE] = str(builds)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(root)],
        cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_unit_tests_run_first_and_each_other_test_waits_for_the_build_it_needs(
    tmp_path: Path,
) -> None:
    root, builds = tmp_path / "tree", tmp_path / "builds"
    _tree(root)
    builds.mkdir()
    _end_after(builds, root / "order", after={"controlplane": "core", "tools": "gangs"}, status={})
    result = _pytest(root, builds, background=True)
    assert result.returncode == 0, result.stdout + result.stderr
    order = (root / "order").read_text().splitlines()
    assert order == ["core -", "gangs controlplane", "helm controlplane,tools"], order
    assert "waiting for the build of the control plane" in result.stdout, result.stdout
    assert "built in the background: helm, promtool" in result.stdout, result.stdout


def test_a_failed_build_shows_its_log_and_the_tests_still_run(tmp_path: Path) -> None:
    root, builds = tmp_path / "tree", tmp_path / "builds"
    _tree(root)
    builds.mkdir()
    _end_after(
        builds, root / "order", after={"controlplane": "core", "tools": "gangs"},
        status={"tools": "1"},
    )  # fmt: skip
    result = _pytest(root, builds, background=True)
    # The tests themselves pass here (they need no binary); a real one fails saying what is
    # missing. The summary says which build failed, with its log.
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the background build of helm, promtool" in result.stdout, result.stdout
    assert "it ended with: 1" in result.stdout, result.stdout
    assert "the last line of tools" in result.stdout, result.stdout


def test_without_background_builds_the_order_is_the_usual_one_and_nothing_waits(
    tmp_path: Path,
) -> None:
    root, builds = tmp_path / "tree", tmp_path / "builds"
    _tree(root)
    builds.mkdir()  # no build ever ends: a wait would last past the inner tests' 1 s bound
    result = _pytest(root, builds, background=False)
    assert result.returncode == 0, result.stdout + result.stderr
    order = (root / "order").read_text().splitlines()
    assert order == ["helm -", "gangs -", "core -"], order
    assert "waiting for" not in result.stdout, result.stdout


def test_a_wait_ends_once_the_runner_has_stopped_the_builds_and_removed_their_folder(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "builds"
    folder.mkdir()
    build = BackgroundBuild("tools", "the tools", folder)
    threading.Timer(0.3, folder.rmdir).start()
    build.await_end(limit_s=60, poll_s=0.05)
    assert build.outcome == "stopped before it ended"
    assert build.waited_s < 30


def test_a_wait_gives_up_at_its_limit_and_says_so(tmp_path: Path) -> None:
    build = BackgroundBuild("controlplane", "the control plane", tmp_path)
    build.await_end(limit_s=0.2, poll_s=0.05)
    assert build.outcome == "still running after 0 s"


def test_under_make_tests_background_builds_a_missing_control_plane_is_found_missing_not_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty cache: build.sh --path builds nothing, and the error names the background
    build rather than starting a second, foreground one inside a test's time."""
    from testbed.cluster import ClusterError, resolve_binaries  # noqa: PLC0415

    monkeypatch.setenv(BUILDS_VARIABLE, str(tmp_path / "builds"))
    monkeypatch.setenv("GANG_SCHEDULER_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("KUBE_BIN_DIR", raising=False)
    started = time.monotonic()
    with pytest.raises(ClusterError, match="background build of the control plane"):
        resolve_binaries()
    assert time.monotonic() - started < 30, "it looked, it did not build"
    assert not (tmp_path / "cache" / "bin").exists() or not any(
        (tmp_path / "cache" / "bin").rglob("kube-apiserver")
    )
