#!/usr/bin/env bash
# Builds (or finds cached) what some tests need beside the control plane: helm and the
# Prometheus Operator's CRDs (the chart's tests), promtool (the chart's alert rules), the
# Coscheduling peer (the bench's smoke test), and the job frameworks' operators named as
# arguments (e2e/operators/versions.txt; make test's short form needs kuberay). Each has its
# own build.sh and cache key; this only runs them, one after the other, and says which failed.
# `make binaries` runs it in the foreground; e2e/run-tests.sh in the background while the
# tests that need none of these run.
#
# Usage: build-tools.sh [OPERATOR...]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")

failed=()
run() {  # a build, its stdout (the binary's path) kept apart from the log
  local what=$1 start; shift
  start=$(date +%s)
  if "$@" >/dev/null; then
    echo "$what: ready ($(( $(date +%s) - start ))s)" >&2
  else
    echo "$what: FAILED (see above)" >&2
    failed+=("$what")
  fi
}
run promtool bash "$here/promtool/build.sh"
run helm bash "$here/helm/build.sh"
run coscheduling bash "$repo/bench/peers/coscheduling/build.sh"
for operator in "$@"; do
  run "the $operator operator" bash "$here/operators/build.sh" "$operator"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "error: could not build ${failed[*]}; the tests that need them will fail saying so" >&2
  exit 1
fi
