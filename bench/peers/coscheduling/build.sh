#!/usr/bin/env bash
# Builds kube-scheduler with scheduler-plugins' Coscheduling plugin (main.go, go.mod beside
# this script), a peer of gang-scheduler in `make bench`, and caches it under
# ${GANG_SCHEDULER_CACHE:-~/.cache/gang-scheduler}/bin/coscheduling-<version>-<key>/, where
# <key> is a hash of go.mod, go.sum, main.go and RECIPE: it is rebuilt only when one of
# them changes. A cold build takes several minutes on a small machine.
#
# Prints the path of the binary on its last line of stdout. With --path it only prints
# where the binary is (or would be), builds nothing, and exits 1 if it is not there.
set -euo pipefail
RECIPE=1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${GANG_SCHEDULER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gang-scheduler}

die() { echo "error: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "Go is not installed (or not on PATH): install Go 1.26 or
  newer (Debian: apt-get install golang-go; or https://go.dev/doc/install) to build the
  Coscheduling peer of make bench"

version_of() {  # the version go.mod requires of module $1
  awk -v m="$1" '{for (i = 1; i < NF; i++) if ($i == m) {print $(i + 1); exit}}' "$here/go.mod"
}
plugins_version=$(version_of sigs.k8s.io/scheduler-plugins)
k8s_version=$(version_of k8s.io/kubernetes)
[ -n "$plugins_version" ] && [ -n "$k8s_version" ] || die "could not read the pinned versions from $here/go.mod"

key=$( (echo "recipe $RECIPE"; cat "$here/go.mod" "$here/go.sum" "$here/main.go") | sha256sum | cut -c1-12)
out="$cache_root/bin/coscheduling-$plugins_version-k8s-$k8s_version-$key"
binary="$out/kube-scheduler-coscheduling"
if [ "${1:-}" = "--path" ]; then echo "$binary"; [ -x "$binary" ]; exit; fi
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0

if [ ! -x "$binary" ]; then
  echo "building kube-scheduler $k8s_version with Coscheduling $plugins_version into $out" >&2
  echo "a cold build takes several minutes on a small machine; later runs reuse the cache" >&2
  mkdir -p "$out"
  # kube-scheduler checks its emulation version against its own: stamped with
  # scheduler-plugins' version (v0.34.x) it refuses to start, so it is stamped as the
  # Kubernetes release it is built from.
  major_minor=${k8s_version#v}; major=${major_minor%%.*}; minor=${major_minor#*.}; minor=${minor%%.*}
  ld="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version
      -X k8s.io/component-base/version.gitMajor=$major
      -X k8s.io/component-base/version.gitMinor=$minor
      -X k8s.io/component-base/version.gitTreeState=clean"
  start=$(date +%s)
  if ! (cd "$here" && go build -trimpath -ldflags "$ld" -o "$binary.tmp" .) >&2; then
    rm -f "$binary.tmp"
    die "building the Coscheduling peer failed; see the Go errors above. Check that the Go
  module proxy is reachable (GOPROXY=$(go env GOPROXY))."
  fi
  mv "$binary.tmp" "$binary"
  echo "built kube-scheduler-coscheduling in $(( $(date +%s) - start ))s" >&2
fi
echo "$binary"
