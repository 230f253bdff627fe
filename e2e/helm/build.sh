#!/usr/bin/env bash
# Builds helm from its Go module (helm.sh/helm/v4, at HELM_VERSION below) and caches it under
# ${GANG_SCHEDULER_CACHE:-~/.cache/gang-scheduler}/bin/helm-<version>-<key>/, where <key> is a
# hash of the pinned versions and RECIPE: it is rebuilt only when one of them changes. The
# chart's tests (tests/unit/test_helm_chart.py, e2e/test_helm.py) run this helm; no other.
# `go install module@version` would need the proxy's version list, which it may refuse, so
# the exact version's source is downloaded (served even then) and built where it lies: its
# go.mod has no replace lines and its go.sum is complete, so -mod=readonly writes nothing.
#
# Beside it go servicemonitor-crd.yaml and prometheusrule-crd.yaml, the ServiceMonitor and
# PrometheusRule CRDs of the Prometheus Operator's own module (PROMETHEUS_OPERATOR_VERSION), so
# that the chart's optional ServiceMonitor and PrometheusRule are checked against the schema
# the operator ships (server-side dry run in e2e/test_helm.py). A cache made before the second
# CRD was fetched gains it on the next run, helm untouched (the key is the same).
#
#   build.sh          build (or find cached) helm; prints the binary's path on its last line
#   build.sh --path   only print where it is (or would be); exit 1 if not all there yet
set -euo pipefail
HELM_VERSION=v4.3.1
PROMETHEUS_OPERATOR_VERSION=v0.85.0
RECIPE=1
cache_root=${GANG_SCHEDULER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gang-scheduler}

# shellcheck source=../gomodule.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gomodule.sh"

key=$( (echo "recipe $RECIPE"; echo "helm $HELM_VERSION prometheus-operator $PROMETHEUS_OPERATOR_VERSION") \
       | sha256sum | cut -c1-12)
out="$cache_root/bin/helm-$HELM_VERSION-$key"
binary="$out/helm"
crds=("$out/servicemonitor-crd.yaml" "$out/prometheusrule-crd.yaml")
crds_there() { local c; for c in "${crds[@]}"; do [ -s "$c" ] || return 1; done; }

case "${1:-}" in
  --path) echo "$binary"; [ -x "$binary" ] && crds_there; exit ;;
  "") ;;
  *) die "unknown option ${1}; usage: build.sh [--path]" ;;
esac

if [ ! -x "$binary" ] || ! crds_there; then
  command -v go >/dev/null 2>&1 || die "Go is not installed (or not on PATH): install Go 1.26 or
  newer (Debian: apt-get install golang-go) to build helm, which the chart's tests run"
  export GOTOOLCHAIN=local CGO_ENABLED=0
  mkdir -p "$out"
fi

if [ ! -x "$binary" ]; then
  src=$(module_dir helm.sh/helm/v4 "$HELM_VERSION" "${BASH_SOURCE[0]}")
  echo "building helm $HELM_VERSION into $out" >&2
  echo "a cold build takes a few minutes on a small machine; later runs reuse the cache" >&2
  # As helm's own Makefile stamps a release, so that `helm version` names it.
  ld="-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION
      -X helm.sh/helm/v4/internal/version.metadata=
      -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
  start=$(date +%s)
  if ! (cd "$src" && go build -mod=readonly -trimpath -ldflags "$ld" -o "$binary.tmp" ./cmd/helm) >&2; then
    rm -f "$binary.tmp"
    die "building helm $HELM_VERSION failed; see the Go errors above"
  fi
  mv "$binary.tmp" "$binary"
  echo "built helm in $(( $(date +%s) - start ))s" >&2
fi

if ! crds_there; then
  src=$(module_dir github.com/prometheus-operator/prometheus-operator \
        "$PROMETHEUS_OPERATOR_VERSION" "${BASH_SOURCE[0]}")
  for kind in servicemonitor prometheusrule; do
    crd="$out/$kind-crd.yaml"
    [ -s "$crd" ] && continue
    cp "$src/example/prometheus-operator-crd/monitoring.coreos.com_${kind}s.yaml" "$crd.tmp"
    chmod u+w "$crd.tmp"
    mv "$crd.tmp" "$crd"
  done
fi
echo "$binary"
