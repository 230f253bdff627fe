#!/usr/bin/env bash
# Builds promtool from the Prometheus Go module (github.com/prometheus/prometheus at
# PROMETHEUS_MODULE_VERSION below: Prometheus 3.x is tagged v0.3MM.P for Go, v0.316.0 being
# Prometheus 3.16.0) and caches it under
# ${GANG_SCHEDULER_CACHE:-~/.cache/gang-scheduler}/bin/promtool-<version>-<key>/, where <key>
# is a hash of the pinned version and RECIPE: it is rebuilt only when one of them changes.
# The chart's alert rules (charts/gang-scheduler/files/alerts.yaml) are checked with it
# (`promtool check rules`, tests/unit/test_dashboard.py); no other promtool is used.
# As e2e/helm/build.sh does for helm: the exact version's source is downloaded (the proxy
# serves it even when it refuses a version list) and built where it lies; its go.mod has no
# replace lines and its go.sum is complete, so -mod=readonly writes nothing. The module ships
# a go.work naming nested modules the module's zip leaves out: GOWORK=off builds without it.
#
#   build.sh          build (or find cached) promtool; prints the binary's path on its last line
#   build.sh --path   only print where it is (or would be); exit 1 if it is not there yet
set -euo pipefail
PROMETHEUS_MODULE_VERSION=v0.316.0
PROMETHEUS_VERSION=3.16.0  # the release that module version is (its VERSION file)
RECIPE=2
cache_root=${GANG_SCHEDULER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gang-scheduler}

# shellcheck source=../gomodule.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gomodule.sh"

key=$( (echo "recipe $RECIPE"; echo "prometheus $PROMETHEUS_MODULE_VERSION") | sha256sum | cut -c1-12)
out="$cache_root/bin/promtool-$PROMETHEUS_MODULE_VERSION-$key"
binary="$out/promtool"

case "${1:-}" in
  --path) echo "$binary"; [ -x "$binary" ]; exit ;;
  "") ;;
  *) die "unknown option ${1}; usage: build.sh [--path]" ;;
esac

if [ ! -x "$binary" ]; then
  command -v go >/dev/null 2>&1 || die "Go is not installed (or not on PATH): install Go 1.26.7 or
  newer (Debian: apt-get install golang-go) to build promtool, which checks the chart's alerts"
  export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off
  module=github.com/prometheus/prometheus
  src=$(module_dir "$module" "$PROMETHEUS_MODULE_VERSION" "${BASH_SOURCE[0]}")
  [ "$(cat "$src/VERSION" 2>/dev/null)" = "$PROMETHEUS_VERSION" ] \
    || die "$module@$PROMETHEUS_MODULE_VERSION is not Prometheus $PROMETHEUS_VERSION (its VERSION file says
  $(cat "$src/VERSION" 2>/dev/null || echo nothing)); fix the pair in ${BASH_SOURCE[0]}"
  mkdir -p "$out"
  echo "building promtool $PROMETHEUS_VERSION ($module@$PROMETHEUS_MODULE_VERSION) into $out" >&2
  echo "a cold build takes a few minutes on a small machine; later runs reuse the cache" >&2
  # As Prometheus's own release build stamps it (promu), so that `promtool --version` names it.
  v=github.com/prometheus/common/version
  ld="-s -w -X $v.Version=$PROMETHEUS_VERSION -X $v.Revision=$PROMETHEUS_MODULE_VERSION
      -X $v.Branch=module -X $v.BuildUser=gang-scheduler -X $v.BuildDate=unknown"
  # remove_all_sd is Prometheus's own build tag (plugins/plugin_*.go) that leaves out the
  # service discoveries (AWS, Azure, GCE, ...) promtool registers for `check config`; `check
  # rules` reads none of them, and without them the build takes less than half the CPU.
  start=$(date +%s)
  if ! (cd "$src" && go build -mod=readonly -trimpath -tags remove_all_sd -ldflags "$ld" \
          -o "$binary.tmp" ./cmd/promtool) >&2; then
    rm -f "$binary.tmp"
    die "building promtool $PROMETHEUS_VERSION failed; see the Go errors above"
  fi
  mv "$binary.tmp" "$binary"
  echo "built promtool in $(( $(date +%s) - start ))s" >&2
fi
echo "$binary"
