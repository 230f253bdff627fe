#!/usr/bin/env bash
# Builds the Kubernetes binaries of another release than the default control plane's
# (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl) from the Go module in
# releases/<release>/, and caches them under
# ${GANG_SCHEDULER_CACHE:-~/.cache/gang-scheduler}/bin/k8s-<version>-<key>/ beside links to
# the default build's etcd, KWOK and KWOK stages (built first by build.sh if missing).
#
# Usage: build-release.sh RELEASE [--path]   (RELEASE: a folder of releases/, e.g. 1.37)
# Prints the folder on its last line of stdout, for KUBE_BIN_DIR (with --path, only that,
# building nothing; exit 1 if a binary is missing).
set -euo pipefail
RECIPE=1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${GANG_SCHEDULER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gang-scheduler}

die() { echo "error: $*" >&2; exit 1; }

release=${1:-}
[ -n "$release" ] || die "give the release to build, one of: $(ls "$here/releases" | tr '\n' ' ')"
module="$here/releases/$release"
[ -f "$module/go.mod" ] || die "no release $release: releases/ has $(ls "$here/releases" | tr '\n' ' ')"
command -v go >/dev/null 2>&1 || die "Go is not installed (or not on PATH): install Go 1.26 or newer"

version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3; exit}' "$module/go.mod")
[ -n "$version" ] || die "could not read the pinned k8s.io/kubernetes version from $module/go.mod"
key=$( (echo "recipe $RECIPE"; cat "$module/go.mod" "$module/go.sum") | sha256sum | cut -c1-12)
out="$cache_root/bin/k8s-$version-$key"

wanted=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
shared=(etcd kwok kwok-stages.yaml)
missing=()
for b in "${wanted[@]}"; do [ -x "$out/$b" ] || missing+=("$b"); done
for f in "${shared[@]}"; do [ -e "$out/$f" ] || missing+=("$f"); done
if [ "${2:-}" = "--path" ]; then echo "$out"; [ ${#missing[@]} -eq 0 ]; exit; fi
[ ${#missing[@]} -eq 0 ] && { echo "$out"; exit 0; }

base=$(bash "$here/build.sh" | tail -n1)  # etcd and KWOK, shared with the default release
mkdir -p "$out"
for f in "${shared[@]}"; do ln -sfn "$base/$f" "$out/$f"; done

export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
source "$here/version-ldflags.sh"
kv=$(version_ldflags "$version")
cd "$module"
for b in "${wanted[@]}"; do
  [ -x "$out/$b" ] && continue
  echo "building $b ($version) into $out" >&2
  start=$(date +%s)
  if ! go build -trimpath -ldflags "-s -w $kv" -o "$out/$b.tmp" "k8s.io/kubernetes/cmd/$b" >&2; then
    rm -f "$out/$b.tmp"
    die "building $b ($version) failed; see the Go errors above. Check that the Go module proxy
  is reachable (GOPROXY=$(go env GOPROXY))."
  fi
  mv "$out/$b.tmp" "$out/$b"
  echo "built $b in $(( $(date +%s) - start ))s" >&2
done
echo "$out"
