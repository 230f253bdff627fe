#!/usr/bin/env bash
# Builds kube-scheduler with scheduler-plugins' Coscheduling plugin (main.go, go.mod beside
# this script), a peer of gang-scheduler in `make bench`, and caches it under
# ${GANG_SCHEDULER_CACHE:-~/.cache/gang-scheduler}/bin/coscheduling-<version>-<key>/, where
# <key> is a hash of go.mod, go.sum, main.go and RECIPE: it is rebuilt only when one of
# them changes. A cold build takes several minutes on a small machine.
#
# Prints the path of the binary on its last line of stdout. With --path it only prints
# where the binary is (or would be), builds nothing, and exits 1 if it is not there.
#
# With --control-plane it builds kube-apiserver and kube-controller-manager of the same
# Kubernetes release instead (cached beside it, control-plane-<version>-<key>/) and prints
# their folder: `python -m bench.run --skew` runs Coscheduling against a control plane within
# its version skew. They are built in a scratch copy of this module, whose go.mod gains what
# they need and k8s.io/kubectl at v0.34.8 (the proxy does not serve v0.34.7).
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
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
# kube-scheduler checks its emulation version against its own: stamped with
# scheduler-plugins' version (v0.34.x) it refuses to start, so it is stamped as the
# Kubernetes release it is built from (and so are the control plane's binaries).
major_minor=${k8s_version#v}; major=${major_minor%%.*}; minor=${major_minor#*.}; minor=${minor%%.*}
ld="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version
    -X k8s.io/component-base/version.gitMajor=$major
    -X k8s.io/component-base/version.gitMinor=$minor
    -X k8s.io/component-base/version.gitTreeState=clean"

if [ "${1:-}" = "--control-plane" ]; then
  planes="$cache_root/bin/control-plane-$k8s_version-$key"
  if [ ! -x "$planes/kube-apiserver" ] || [ ! -x "$planes/kube-controller-manager" ]; then
    echo "building kube-apiserver and kube-controller-manager $k8s_version into $planes" >&2
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    cp "$here/go.mod" "$here/go.sum" "$here/main.go" "$scratch/"
    mkdir -p "$planes"
    start=$(date +%s)
    for cmd in kube-apiserver kube-controller-manager; do
      if ! (cd "$scratch" && go mod edit -replace k8s.io/kubectl=k8s.io/kubectl@v0.34.8 \
            && go build -trimpath -ldflags "$ld" -o "$planes/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd") >&2; then
        rm -f "$planes/$cmd.tmp"
        die "building $cmd $k8s_version failed; see the Go errors above"
      fi
      mv "$planes/$cmd.tmp" "$planes/$cmd"
    done
    echo "built the $k8s_version control plane in $(( $(date +%s) - start ))s" >&2
  fi
  echo "$planes"
  exit 0
fi

out="$cache_root/bin/coscheduling-$plugins_version-k8s-$k8s_version-$key"
binary="$out/kube-scheduler-coscheduling"
if [ "${1:-}" = "--path" ]; then echo "$binary"; [ -x "$binary" ]; exit; fi

if [ ! -x "$binary" ]; then
  echo "building kube-scheduler $k8s_version with Coscheduling $plugins_version into $out" >&2
  echo "a cold build takes several minutes on a small machine; later runs reuse the cache" >&2
  mkdir -p "$out"
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
