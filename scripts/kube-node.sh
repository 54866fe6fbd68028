#!/usr/bin/env bash
# Builds what a single-node cluster needs besides kube-apiserver and etcd
# (scripts/kube-apiserver.sh builds those, and this script calls it first):
# kube-controller-manager, kube-scheduler, kubelet and kube-proxy at the same
# Kubernetes version, and CoreDNS; prints the directory that holds them all.
# scripts/cluster.sh uses it.
#
#   dir=$(./scripts/kube-node.sh)
#
# The Kubernetes binaries come from the wrapper module kube-apiserver.sh
# generates (the same k8s.io/kubernetes, the same staging replacements), with
# their main packages added to its tools file; CoreDNS from its own module
# (go install, it has no replace directives). Each binary is built once and
# kept; a finished set leaves a marker. A cold build takes a few minutes more
# once kube-apiserver's has warmed the Go caches. Progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

coredns_version="${TALKIDE_COREDNS_VERSION:-1.15.0}"

log() { echo "kube-node: $*" >&2; }
die() { log "$*"; exit 1; }

dir=$(./scripts/kube-apiserver.sh)
version=$("$dir/kube-apiserver" --version | sed 's/^Kubernetes v//')
minor="${version#1.}"; minor="${minor%%.*}"
export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0

built() {
  [ -f "$dir/.talkide-node-built" ] || return 1
  local b
  for b in kube-controller-manager kube-scheduler kubelet kube-proxy; do
    [ "$("$dir/$b" --version 2>/dev/null)" = "Kubernetes v$version" ] || return 1
  done
  [[ "$("$dir/coredns" -version 2>/dev/null)" == *"CoreDNS-$coredns_version"* ]]
}

build() {
  local start src="$dir/src"
  start=$(date +%s)
  [ -f "$src/go.mod" ] || die "$src/go.mod is missing: remove $dir and run again"
  cat >"$src/tools.go" <<'EOF'
//go:build tools

// Package tools names the main packages this module builds, so that go mod
// tidy keeps their dependencies.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
EOF
  (cd "$src" && go mod tidy >&2) || die "go mod tidy failed in $src"
  local ldflags="-s -w"
  ldflags+=" -X k8s.io/component-base/version.gitVersion=v$version"
  ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
  ldflags+=" -X k8s.io/component-base/version.gitMinor=$minor"
  ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
  # The missing ones in one go build, so that their links, and what each
  # compiles alone, run side by side on the machine's CPUs.
  local b pkgs=() out="$dir/.node-new"
  for b in kube-controller-manager kube-scheduler kubelet kube-proxy; do
    [ "$("$dir/$b" --version 2>/dev/null)" = "Kubernetes v$version" ] || pkgs+=("k8s.io/kubernetes/cmd/$b")
  done
  if [ ${#pkgs[@]} -gt 0 ]; then
    rm -rf "$out"
    mkdir -p "$out"
    log "go build ${pkgs[*]##*/}"
    (cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$out/" "${pkgs[@]}") ||
      die "go build ${pkgs[*]} failed"
    for b in "${pkgs[@]##*/}"; do
      mv "$out/$b" "$dir/$b"
    done
    rmdir "$out"
  fi
  if [[ "$("$dir/coredns" -version 2>/dev/null)" != *"CoreDNS-$coredns_version"* ]]; then
    log "go install github.com/coredns/coredns@v$coredns_version"
    GOBIN="$dir/.coredns-bin" go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@v$coredns_version" ||
      die "go install github.com/coredns/coredns@v$coredns_version failed"
    mv "$dir/.coredns-bin/coredns" "$dir/coredns"
    rmdir "$dir/.coredns-bin"
  fi
  touch "$dir/.talkide-node-built"
  log "built in $(( $(date +%s) - start ))s"
}

exec 9>"$dir/.node-lock"
if ! flock -n 9; then
  log "another run is building the node's binaries in $dir; waiting for it"
  flock 9
fi
if ! built; then
  rm -f "$dir/.talkide-node-built"
  build
fi
built || die "the build in $dir did not produce working node binaries"
echo "$dir"
