#!/usr/bin/env bash
# Builds a job framework's real operator from its Go module, at the exact version pinned in
# versions.txt beside this script, and caches it under
# ${GANG_SCHEDULER_CACHE:-~/.cache/gang-scheduler}/bin/operator-<name>-<version>-<key>/, where
# <key> is a hash of its line in versions.txt and RECIPE: it is rebuilt only when one of them
# changes. `go install module@version` is refused for modules whose version list the proxy
# will not give, and some carry `replace` lines that `go install` rejects, so the module's
# source is downloaded (an exact version is served) and built in a copy of it.
#
#   build.sh NAME         build (or find cached) NAME's operator; prints the binary's path
#   build.sh NAME --path  only print where it is (or would be); exit 1 if not built yet
#   build.sh NAME --crds  print the folder of the module's CRDs (downloading it if need be)
#   build.sh NAME --source  print the folder of the module's source (its webhook manifests)
#
# The CRDs are the module's own (installed by the tests with kubectl), so the objects the
# tests write are checked against the schemas the operator ships.
set -euo pipefail
RECIPE=1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${GANG_SCHEDULER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gang-scheduler}

# shellcheck source=../gomodule.sh
source "$here/../gomodule.sh"

name=${1:-}
[ -n "$name" ] || die "usage: build.sh NAME [--path|--crds] (NAME from $here/versions.txt)"
line=$(awk -v n="$name" '$1 == n' "$here/versions.txt")
[ -n "$line" ] || die "no operator named $name in $here/versions.txt"
read -r _ module version package crds <<<"$line"

command -v go >/dev/null 2>&1 || die "Go is not installed (or not on PATH): install Go 1.26 or
  newer (Debian: apt-get install golang-go) to build the $name operator the client tests run"

key=$( (echo "recipe $RECIPE"; echo "$line") | sha256sum | cut -c1-12)
out="$cache_root/bin/operator-$name-$version-$key"
binary="$out/$name"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0

source_dir() { module_dir "$module" "$version" "$here/versions.txt"; }

case "${2:-}" in
  --path) echo "$binary"; [ -x "$binary" ]; exit ;;
  --crds) echo "$(source_dir)/$crds"; exit ;;
  --source) source_dir; exit ;;
  "") ;;
  *) die "unknown option ${2}" ;;
esac

if [ ! -x "$binary" ]; then
  src=$(source_dir)
  echo "building the $name operator ($module $version) into $out" >&2
  echo "a cold build takes several minutes on a small machine; later runs reuse the cache" >&2
  work=$(mktemp -d)
  trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
  cp -r "$src/." "$work/"
  chmod -R u+w "$work"
  mkdir -p "$out"
  start=$(date +%s)
  if ! (cd "$work" && go build -trimpath -ldflags "-s -w" -o "$binary.tmp" "$package") >&2; then
    rm -f "$binary.tmp"
    die "building the $name operator failed; see the Go errors above"
  fi
  mv "$binary.tmp" "$binary"
  echo "built the $name operator in $(( $(date +%s) - start ))s" >&2
fi
echo "$binary"
