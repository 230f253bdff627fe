#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd and kwok from the Go module pinned in go.mod and
# caches them under ${GANG_SCHEDULER_CACHE:-~/.cache/gang-scheduler}/bin/<key>/, where
# <key> is a hash of go.mod, go.sum, cmd/ and RECIPE below: the binaries are rebuilt only
# when a pinned version changes, or RECIPE is bumped because the way they are built changed.
# Beside the binaries it writes kwok-stages.yaml, KWOK's own "fast" stages from the pinned
# module (nodes become Ready, bound pods Running, Job pods Succeeded, deleted pods go).
#
# Prints the folder that holds the binaries on its last line of stdout (with --path, only
# that, building nothing; exit 1 if one is missing).
# If KUBE_BIN_DIR names a folder with kube-apiserver and etcd (e.g. setup-envtest's),
# that folder is used instead and nothing is built; kwok and kubectl are then taken from
# it when present, else built.
set -euo pipefail
RECIPE=1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${GANG_SCHEDULER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gang-scheduler}

die() { echo "error: $*" >&2; exit 1; }

if ! command -v go >/dev/null 2>&1; then
  die "Go is not installed (or not on PATH). The local control plane is built from Go modules:
  install Go 1.26 or newer (Debian: apt-get install golang-go; or https://go.dev/doc/install),
  or set KUBE_BIN_DIR to a folder holding kube-apiserver and etcd (e.g. from setup-envtest)."
fi

go_version=$(go env GOVERSION)                       # e.g. go1.26.8
need=$(awk '/^go [0-9]/ {print $2; exit}' "$here/go.mod")  # e.g. 1.26.0
if [ "$(printf '%s\n%s\n' "go$need" "$go_version" | sort -V | head -n1)" != "go$need" ]; then
  die "$go_version is too old to build the pinned control plane: it needs go$need or newer.
  Install a newer Go, or set KUBE_BIN_DIR to prebuilt kube-apiserver and etcd binaries."
fi

version_of() {  # the version go.mod requires of module $1 (in or out of a require block)
  awk -v m="$1" '{for (i = 1; i < NF; i++) if ($i == m) {print $(i + 1); exit}}' "$here/go.mod"
}
k8s_version=$(version_of k8s.io/kubernetes)
kwok_version=$(version_of sigs.k8s.io/kwok)
etcd_version=$(version_of go.etcd.io/etcd/server/v3)
[ -n "$k8s_version" ] && [ -n "$kwok_version" ] && [ -n "$etcd_version" ] \
  || die "could not read the pinned versions from $here/go.mod"

key=$( (echo "recipe $RECIPE"; cat "$here/go.mod" "$here/go.sum" "$here"/cmd/*/*.go) | sha256sum | cut -c1-12)
out="$cache_root/bin/k8s-$k8s_version-etcd-$etcd_version-kwok-$kwok_version-$key"

# kube-scheduler is the oracle of e2e/test_oracle.py: what a pod spec allows, per kube-scheduler.
wanted=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok)
if [ -n "${KUBE_BIN_DIR:-}" ]; then
  for b in kube-apiserver etcd; do
    [ -x "$KUBE_BIN_DIR/$b" ] || die "KUBE_BIN_DIR=$KUBE_BIN_DIR has no executable $b"
  done
  wanted=()
  for b in kube-controller-manager kube-scheduler kubectl kwok; do [ -x "$KUBE_BIN_DIR/$b" ] || wanted+=("$b"); done
fi

missing=()
for b in "${wanted[@]}"; do [ -x "$out/$b" ] || missing+=("$b"); done
# --path: only print the folder (as on the last line otherwise), build nothing, and exit 1 if
# a binary is not there yet: for tests that need kubectl but must not start a cold build.
if [ "${1:-}" = "--path" ]; then echo "$out"; [ ${#missing[@]} -eq 0 ]; exit; fi
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0

if [ ${#missing[@]} -gt 0 ]; then
  echo "building ${missing[*]} (k8s $k8s_version, etcd $etcd_version, kwok $kwok_version) into $out" >&2
  echo "a cold build takes a while on a small machine; later runs reuse the cache" >&2
  mkdir -p "$out"
  source "$here/version-ldflags.sh"
  kv=$(version_ldflags "$k8s_version")
  cd "$here"
  for b in "${missing[@]}"; do
    case $b in
      kube-apiserver) pkg=k8s.io/kubernetes/cmd/kube-apiserver; ld="-s -w $kv" ;;
      kubectl)        pkg=k8s.io/kubernetes/cmd/kubectl;        ld="-s -w $kv" ;;
      kube-controller-manager) pkg=k8s.io/kubernetes/cmd/kube-controller-manager; ld="-s -w $kv" ;;
      kube-scheduler) pkg=k8s.io/kubernetes/cmd/kube-scheduler; ld="-s -w $kv" ;;
      etcd)           pkg=./cmd/etcd;                           ld="-s -w" ;;
      kwok)           pkg=sigs.k8s.io/kwok/cmd/kwok;            ld="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${kwok_version#v}" ;;
    esac
    start=$(date +%s)
    if ! go build -trimpath -ldflags "$ld" -o "$out/$b.tmp" "$pkg" >&2; then
      rm -f "$out/$b.tmp"
      die "building $b ($pkg) failed; see the Go errors above. Check that the Go module proxy
  is reachable (GOPROXY=$(go env GOPROXY)) and that $go_version can build $k8s_version,
  or set KUBE_BIN_DIR to prebuilt binaries."
    fi
    mv "$out/$b.tmp" "$out/$b"
    echo "built $b in $(( $(date +%s) - start ))s" >&2
  done
fi
if [ ! -s "$out/kwok-stages.yaml" ]; then
  mkdir -p "$out"
  kwok_dir=$(cd "$here" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok) \
    || die "could not find the sigs.k8s.io/kwok module; is the Go module proxy reachable?"
  for f in node/fast/node-initialize.yaml pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml \
           pod/fast/pod-delete.yaml; do
    echo "---"; cat "$kwok_dir/kustomize/stage/$f"
  done > "$out/kwok-stages.yaml.tmp"
  mv "$out/kwok-stages.yaml.tmp" "$out/kwok-stages.yaml"
fi
echo "$out"
