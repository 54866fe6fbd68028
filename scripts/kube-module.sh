# Shared by scripts/kube-apiserver.sh and scripts/kube-node.sh, which source
# it: both build from the same generated wrapper module (see
# kube-apiserver.sh) and stamp the same version into what they build.

# kube_tidy SRC PKG...: names the main packages PKG in the module SRC's tools
# file, so that go mod tidy keeps their dependencies, and tidies it.
kube_tidy() {
  local src="$1" pkg
  shift
  {
    echo "//go:build tools"
    echo
    echo "// Package tools names the main packages this module builds, so that go mod"
    echo "// tidy keeps their dependencies."
    echo "package tools"
    echo
    echo "import ("
    for pkg in "$@"; do echo "	_ \"$pkg\""; done
    echo ")"
  } >"$src/tools.go"
  (cd "$src" && go mod tidy >&2) || die "go mod tidy failed in $src"
}

# kube_ldflags VERSION: the linker flags of a Kubernetes binary at VERSION
# (1.37.2). Without the version flags a binary reports v0.0.0-master, and
# clients that check the server's version see a development build; they
# name a package etcd does not link, so they change nothing in it.
kube_ldflags() {
  local minor="${1#1.}"
  minor="${minor%%.*}"
  echo "-s -w" \
    "-X k8s.io/component-base/version.gitVersion=v$1" \
    "-X k8s.io/component-base/version.gitMajor=1" \
    "-X k8s.io/component-base/version.gitMinor=$minor" \
    "-X k8s.io/component-base/version.gitTreeState=clean"
}
