# Sourced (not run) by the scripts that build a tool from the exact version of its Go module:
# e2e/helm/build.sh, e2e/promtool/build.sh, e2e/operators/build.sh.

die() { echo "error: $*" >&2; exit 1; }

# module_dir MODULE VERSION PINNED_IN: the source of MODULE at exactly VERSION, from the module
# cache, downloaded if need be. `go install module@version` needs the proxy's version list,
# which it may refuse; an exact version's source is served even then. PINNED_IN names where a
# user changes the version when the proxy serves none.
module_dir() {
  local dir
  dir=$(go mod download -json "$1@$2" 2>/dev/null | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] && [ -d "$dir" ] || die "the Go module proxy did not serve $1@$2
  (GOPROXY=$(go env GOPROXY)); the version is pinned in $3"
  echo "$dir"
}
