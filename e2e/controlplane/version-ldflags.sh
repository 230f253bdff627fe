# Sourced by build.sh: version_ldflags VERSION prints the -X flags that
# stamp a Kubernetes binary with VERSION (v1.37.2), as its own release build does, so that
# `--version` and the API server's /version say it (testbed/cluster.py reads the release).
version_ldflags() {
  local version=$1 major_minor major minor
  major_minor=${version#v}; major=${major_minor%%.*}; minor=${major_minor#*.}; minor=${minor%%.*}
  local pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    printf -- '-X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean ' \
      "$pkg" "$version" "$pkg" "$major" "$pkg" "$minor" "$pkg"
  done
}
