#!/usr/bin/env bash
# Builds the local control plane from Go modules and caches it under
# ${GANG_SCHEDULER_CACHE:-~/.cache/gang-scheduler}/bin/:
#   - etcd and KWOK from this folder's module (go.mod, cmd/), with KWOK's own "fast" stages
#     from the pinned module (nodes become Ready, bound pods Running, Job pods Succeeded,
#     deleted pods go) in kwok-stages.yaml: base-etcd-<v>-kwok-<v>-<key>/;
#   - kube-apiserver, kube-controller-manager, kube-scheduler and kubectl of one Kubernetes
#     release from releases/<release>/go.mod, in one `go build` (the packages they share
#     compile once): k8s-<version>-<key>/, beside links to the base's etcd, KWOK and stages.
# <key> hashes the module files (and cmd/) with RECIPE: a folder is rebuilt only when a pinned
# version changes, or RECIPE is bumped because the way it is built changed. The base is
# shared by every release, so a second release costs only its four binaries.
#
# Usage: build.sh [--release RELEASE] [--path]
#   RELEASE: a folder of releases/ (default: the one named in releases/default).
#   Prints the release's folder (for KUBE_BIN_DIR) on its last line of stdout; with --path,
#   only that, building nothing, and exit 1 if something is missing.
# If KUBE_BIN_DIR names a folder with kube-apiserver and etcd (e.g. setup-envtest's), the
# binaries it has are not built; the others are, into the folders above.
set -euo pipefail
RECIPE=1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${GANG_SCHEDULER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gang-scheduler}

die() { echo "error: $*" >&2; exit 1; }

release=$(cat "$here/releases/default")
path_only=
while [ $# -gt 0 ]; do
  case $1 in
    --release) [ $# -ge 2 ] || die "--release needs a release, one of: $(cd "$here/releases" && ls -d */ | tr -d / | tr '\n' ' ')"
               release=$2; shift 2 ;;
    --path)    path_only=1; shift ;;
    *)         die "unknown option $1; usage: build.sh [--release RELEASE] [--path]" ;;
  esac
done
module="$here/releases/$release"
[ -f "$module/go.mod" ] \
  || die "no release $release: releases/ has $(cd "$here/releases" && ls -d */ | tr -d / | tr '\n' ' ')"

if ! command -v go >/dev/null 2>&1; then
  die "Go is not installed (or not on PATH). The local control plane is built from Go modules:
  install Go 1.26 or newer (Debian: apt-get install golang-go; or https://go.dev/doc/install),
  or set KUBE_BIN_DIR to a folder holding kube-apiserver and etcd (e.g. from setup-envtest)."
fi
go_version=$(go env GOVERSION)                       # e.g. go1.26.8
for mod in "$here/go.mod" "$module/go.mod"; do
  need=$(awk '/^go [0-9]/ {print $2; exit}' "$mod")  # e.g. 1.26.0
  if [ "$(printf '%s\n%s\n' "go$need" "$go_version" | sort -V | head -n1)" != "go$need" ]; then
    die "$go_version is too old to build the pinned control plane: $mod needs go$need or newer.
  Install a newer Go, or set KUBE_BIN_DIR to prebuilt kube-apiserver and etcd binaries."
  fi
done

version_of() {  # the version module $2's go.mod requires of module $1 (in or out of a require block)
  awk -v m="$1" '$1 == "replace" || $1 == "=>" {next} {for (i = 1; i < NF; i++) if ($i == m) {print $(i + 1); exit}}' "$2"
}
k8s_version=$(version_of k8s.io/kubernetes "$module/go.mod")
kwok_version=$(version_of sigs.k8s.io/kwok "$here/go.mod")
etcd_version=$(version_of go.etcd.io/etcd/server/v3 "$here/go.mod")
[ -n "$k8s_version" ] && [ -n "$kwok_version" ] && [ -n "$etcd_version" ] \
  || die "could not read the pinned versions from $here/go.mod and $module/go.mod"

# Comments are left out of the keys: rewording one rebuilds nothing.
base_key=$( (echo "recipe $RECIPE"; grep -hv '^//' "$here/go.mod" "$here/go.sum" "$here"/cmd/*/*.go) | sha256sum | cut -c1-12)
base="$cache_root/bin/base-etcd-$etcd_version-kwok-$kwok_version-$base_key"
key=$( (echo "recipe $RECIPE"; grep -hv '^//' "$module/go.mod" "$module/go.sum") | sha256sum | cut -c1-12)
out="$cache_root/bin/k8s-$k8s_version-$key"

# kube-scheduler is the oracle of e2e/oracle.py and the upstream peer of the bench.
base_wanted=(etcd kwok)
release_wanted=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
if [ -n "${KUBE_BIN_DIR:-}" ]; then
  for b in kube-apiserver etcd; do
    [ -x "$KUBE_BIN_DIR/$b" ] || die "KUBE_BIN_DIR=$KUBE_BIN_DIR has no executable $b"
  done
  keep() { for b in "$@"; do [ -x "$KUBE_BIN_DIR/$b" ] || echo "$b"; done; }
  mapfile -t base_wanted < <(keep "${base_wanted[@]}")
  mapfile -t release_wanted < <(keep "${release_wanted[@]}")
fi
base_missing=() release_missing=()
for b in "${base_wanted[@]}"; do [ -x "$base/$b" ] || base_missing+=("$b"); done
[ -s "$base/kwok-stages.yaml" ] || base_missing+=(kwok-stages.yaml)
for b in "${release_wanted[@]}"; do [ -x "$out/$b" ] || release_missing+=("$b"); done
if [ -n "$path_only" ]; then
  echo "$out"
  [ ${#base_missing[@]} -eq 0 ] && [ ${#release_missing[@]} -eq 0 ] && [ -e "$out/kwok-stages.yaml" ]
  exit
fi
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
source "$here/version-ldflags.sh"

# go build PKG... into folder $1 with ldflags $2: all at once into a scratch folder, then each
# binary moved into place, so that a failed or interrupted build leaves no half-written binary
# (and, by the trap, no scratch folder either).
scratch=
trap '[ -z "$scratch" ] || rm -rf "$scratch"' EXIT
build_into() {
  local dir=$1 ld=$2 start; shift 2
  scratch=$(mktemp -d "$dir/.build.XXXXXX")
  start=$(date +%s)
  if ! go build -trimpath -ldflags "$ld" -o "$scratch/" "$@" >&2; then
    rm -rf "$scratch"
    die "building $* failed; see the Go errors above. Check that the Go module proxy
  is reachable (GOPROXY=$(go env GOPROXY)) and that $go_version can build them,
  or set KUBE_BIN_DIR to prebuilt binaries."
  fi
  for f in "$scratch"/*; do mv "$f" "$dir/"; done
  rm -rf "$scratch"
  scratch=
  echo "built ${*##*/} in $(( $(date +%s) - start ))s" >&2
}

if [ ${#base_missing[@]} -gt 0 ]; then
  echo "building ${base_missing[*]} (etcd $etcd_version, kwok $kwok_version) into $base" >&2
  mkdir -p "$base"
  cd "$here"
  for b in "${base_missing[@]}"; do
    case $b in
      etcd) build_into "$base" "-s -w" ./cmd/etcd ;;
      kwok) build_into "$base" "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${kwok_version#v}" sigs.k8s.io/kwok/cmd/kwok ;;
      kwok-stages.yaml)
        kwok_dir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok) \
          || die "could not find the sigs.k8s.io/kwok module; is the Go module proxy reachable?"
        for f in node/fast/node-initialize.yaml pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml \
                 pod/fast/pod-delete.yaml; do
          echo "---"; cat "$kwok_dir/kustomize/stage/$f"
        done > "$base/kwok-stages.yaml.tmp"
        mv "$base/kwok-stages.yaml.tmp" "$base/kwok-stages.yaml" ;;
    esac
  done
fi

mkdir -p "$out"
if [ ${#release_missing[@]} -gt 0 ]; then
  echo "building ${release_missing[*]} (Kubernetes $k8s_version) into $out" >&2
  echo "a cold build takes several minutes on a small machine; later runs reuse the cache" >&2
  cd "$module"
  build_into "$out" "-s -w $(version_ldflags "$k8s_version")" "${release_missing[@]/#/k8s.io/kubernetes/cmd/}"
fi
# The release's folder is complete in itself (KUBE_BIN_DIR may name it): the shared parts are
# linked, and linked again on every run, so a rebuilt base is picked up.
for f in etcd kwok kwok-stages.yaml; do
  if [ -e "$base/$f" ]; then ln -sfn "$base/$f" "$out/$f"; fi
done
echo "$out"
