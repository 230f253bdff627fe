"""make test starts its tests before its Go builds end (e2e/run-tests.sh): the control plane
builds first, then, at the lowest CPU priority, helm, promtool, the Coscheduling peer and the
KubeRay operator (e2e/build-tools.sh). GANG_SCHEDULER_BUILDS names the folder where each build
writes its log and, when it ends, its exit status. With it set, the tests run in three steps:

1. the unit tests (tests/unit/) that are not marked ``tools``: they need no binary, and run
   while the control plane builds;
2. the others, once the control plane's build has ended: most of them wait on the API server
   and leave much of the CPU to the tools' build;
3. the tests marked ``tools``, once the tools' build has ended.

Each wait happens before the test's own protocol starts, outside pytest-timeout's bound for
the test: a cold build takes minutes, and that is the build's time, not the test's. A build
that failed or did not end in time makes the tests that need it fail on their own, saying
what is missing; its log's tail is shown at the end. Without GANG_SCHEDULER_BUILDS (pytest
run by hand) nothing changes: a binary that is not built is a failure that says to run
``make binaries``."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testbed.cluster import BACKGROUND_BUILDS as BUILDS_VARIABLE

UNIT_TESTS = ("tests", "unit")  # under the root folder
# Cold, on 2 cores, the control plane took about 14 minutes alone and the tools about 15:
# while a test waits for one nothing else runs, so the build has the machine.
WAIT_LIMIT_S = 1800.0
LOG_LINES_ON_FAILURE = 40


@dataclass
class BackgroundBuild:
    """One build e2e/run-tests.sh runs: ``<name>.log`` while it runs, ``<name>.status`` (its
    exit status) once it has ended."""

    name: str
    what: str
    folder: Path
    outcome: str | None = None  # None until waited for; "0" when it succeeded
    waited_s: float = 0.0

    @property
    def status_file(self) -> Path:
        return self.folder / f"{self.name}.status"

    @property
    def log_file(self) -> Path:
        return self.folder / f"{self.name}.log"

    def await_end(self, *, limit_s: float, poll_s: float = 1.0) -> None:
        """Until the status is written, or ``limit_s`` has passed, or the folder is gone (the
        runner stopped the builds: nothing will be written)."""
        started = time.monotonic()
        while (
            not self.status_file.exists()
            and self.folder.is_dir()
            and time.monotonic() - started < limit_s
        ):
            time.sleep(poll_s)
        self.waited_s = time.monotonic() - started
        if self.status_file.exists():
            self.outcome = self.status_file.read_text().strip() or "unknown"
        elif not self.folder.is_dir():
            self.outcome = "stopped before it ended"
        else:
            self.outcome = f"still running after {limit_s:.0f} s"

    def log_lines(self) -> list[str]:
        if not self.log_file.exists():
            return []
        return self.log_file.read_text(errors="replace").splitlines()


@dataclass
class Builds:
    control_plane: BackgroundBuild
    tools: BackgroundBuild
    awaited: list[BackgroundBuild] = field(default_factory=list)


BUILDS_KEY = pytest.StashKey[Builds]()


def step_of(item: pytest.Item) -> int:
    """0: needs no binary; 1: needs the control plane; 2: needs the tools too."""
    if item.get_closest_marker("tools") is not None:
        return 2
    path = Path(str(item.path))
    unit = path.is_relative_to(item.config.rootpath) and (
        path.relative_to(item.config.rootpath).parts[: len(UNIT_TESTS)] == UNIT_TESTS
    )
    return 0 if unit else 1


def pytest_configure(config: pytest.Config) -> None:
    folder = os.environ.get(BUILDS_VARIABLE)
    if folder:
        config.stash[BUILDS_KEY] = Builds(
            control_plane=BackgroundBuild(
                "controlplane", "the control plane (e2e/controlplane/build.sh)", Path(folder)
            ),
            tools=BackgroundBuild(
                "tools",
                "helm, promtool, the Coscheduling peer and the KubeRay operator "
                "(e2e/build-tools.sh)",
                Path(folder),
            ),
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if BUILDS_KEY in config.stash:
        items.sort(key=step_of)  # stable: each step keeps the usual order


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item):
    builds = item.config.stash.get(BUILDS_KEY, None)
    if builds is not None:
        needed = [builds.control_plane, builds.tools][: step_of(item)]
        reporter = item.config.pluginmanager.get_plugin("terminalreporter")
        for build in needed:
            if build.outcome is not None:
                continue
            if reporter is not None and not build.status_file.exists():
                reporter.write_line(f"waiting for the build of {build.what} to end")
            build.await_end(limit_s=WAIT_LIMIT_S)
            builds.awaited.append(build)
    yield


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    builds = config.stash.get(BUILDS_KEY, None)
    if builds is None:
        return
    for build in builds.awaited:
        if build.outcome == "0":
            terminalreporter.write_line(
                f"built in the background: {build.what}; the tests waited "
                f"{build.waited_s:.0f} s for it"
            )
            continue
        terminalreporter.section(f"the background build of {build.what}", red=True)
        terminalreporter.write_line(f"it ended with: {build.outcome}")
        for line in build.log_lines()[-LOG_LINES_ON_FAILURE:]:
            terminalreporter.write_line(line)
