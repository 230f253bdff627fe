#!/usr/bin/env bash
# make test's runner: pytest with its arguments, started while the Go builds run in the
# background, the control plane's first (e2e/controlplane/build.sh), then, at the lowest CPU
# priority, helm, promtool, the Coscheduling peer and the KubeRay operator
# (e2e/build-tools.sh kuberay). Run one after the other before the first test, they were most
# of a cold make test; but the unit tests need none of them, and the tests against the API
# server leave much of the CPU idle while they wait on it. e2e/awaiting_builds.py orders the
# tests and makes each wait for the build it needs; while GANG_SCHEDULER_BUILDS is set, the
# tests never build. On a warm cache the builds find everything at once.
#
# However the run ends, a build still running is stopped (SIGTERM: a job started in the
# background ignores SIGINT, and so do go and its tools under it). Each build.sh moves a binary
# into its cache only once it is whole and removes its scratch folder; go's temporary files,
# which it removes only on SIGINT, go under the runner's folder, removed at the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
py=${PY:-.venv/bin/python}

builds=$(mktemp -d -t gang-scheduler-builds.XXXXXX)
stop_builds() {
  local group
  group=$(cat "$builds/group" 2>/dev/null || true)
  if [ -n "$group" ] && kill -0 -- "-$group" 2>/dev/null; then
    echo "stopping the background builds (e2e/run-tests.sh) the tests that ran did not wait for" >&2
    kill -TERM -- "-$group" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 -- "-$group" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$group" 2>/dev/null || true
  fi
  rm -rf "$builds"
}
trap stop_builds EXIT
mkdir "$builds/go"
export GANG_SCHEDULER_BUILDS="$builds" GOTMPDIR="$builds/go"
# In a session of its own (its process group is written down), so that the whole build, go
# and its compilers, can be stopped at once; stopped, it does not go on to the next build.
# shellcheck disable=SC2016
setsid bash -c '
  echo $$ >"$1/group"
  trap "exit 130" INT TERM
  ended() { echo "$2" >"$1/$3.tmp"; mv "$1/$3.tmp" "$1/$3.status"; }
  rc=0; bash e2e/controlplane/build.sh >"$1/controlplane.log" 2>&1 || rc=$?
  ended "$1" "$rc" controlplane
  rc=0; nice -n 19 bash e2e/build-tools.sh kuberay >"$1/tools.log" 2>&1 || rc=$?
  ended "$1" "$rc" tools
' builds "$builds" &
disown  # its end is the status files' to say, not a job notice's
"$py" -m pytest "$@"
