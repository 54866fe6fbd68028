#!/usr/bin/env bash
# Runs every test of the project: formatting, vet, and go test with the race
# detector, with a throwaway PostgreSQL unless TALKIDE_TEST_DATABASE_URL is
# set. This is the README's test command and what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v go >/dev/null 2>&1; then
  echo "test.sh: Go is not on PATH (expected /usr/local/go/bin/go, Go 1.26)" >&2
  exit 1
fi
go version

echo "== gofmt"
unformatted=$(gofmt -l cmd internal 2>/dev/null || true)
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

echo "== go vet"
# With -race, vet compiles the packages as go test -race below does, so
# that on a new machine the dependencies compile once for both, not twice.
go vet -race ./...

# What the run started is stopped however it ends: the builds in the
# background (each a process group of its own, by setsid), the throwaway
# PostgreSQL and the cluster.
background=$(mktemp -d)
cleanup() {
  local pid
  for pid in ${kube_pid:-} ${prepare_pid:-} ${browser_pid:-}; do kill -- "-$pid" 2>/dev/null || true; done
  if [ -n "${cluster_up:-}" ]; then ./scripts/cluster.sh down || true; fi
  if [ -n "${TALKIDE_TESTDB_DIR:-}" ]; then ./scripts/testdb.sh stop "$TALKIDE_TESTDB_DIR"; fi
  rm -rf "$background"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# joined NAME PID: waits for a build started in the background, shows what
# it said ($background/NAME.log), and fails the run if it failed.
joined() {
  local ok=1
  wait "$2" || ok=
  cat "$background/$1.log"
  [ -n "$ok" ] || { echo "test.sh: $1 failed" >&2; exit 1; }
}

# The tests against a Kubernetes API server (internal/kubetest) run real
# kube-apiserver and etcd binaries: build them when they are missing, once,
# cached by version; several minutes the first time on a new machine, a
# fraction of a second after (docs/testing.md). The steps between here and
# go test are downloads and dpkg, so the build runs beside them and go test
# waits for it (beside go vet, which compiles too, it gained nothing).
# TALKIDE_KUBE_ASSETS=skip skips those tests.
if [ -z "${TALKIDE_KUBE_ASSETS:-}" ]; then
  echo "== kube-apiserver and etcd (scripts/kube-apiserver.sh), beside the steps below"
  setsid ./scripts/kube-apiserver.sh >"$background/kube-assets" 2>"$background/kube-apiserver.sh.log" &
  kube_pid=$!
elif [ "$TALKIDE_KUBE_ASSETS" = skip ]; then
  echo "== kube-apiserver: TALKIDE_KUBE_ASSETS=skip, the tests that need it are skipped"
fi

# The PostgreSQL tests use TALKIDE_TEST_DATABASE_URL; without it, start a
# throwaway server for this run and remove it afterwards, however the run
# ends. TALKIDE_TEST_DATABASE_URL=skip skips those tests (docs/storage.md).
if [ -z "${TALKIDE_TEST_DATABASE_URL:-}" ]; then
  echo "== PostgreSQL (scripts/testdb.sh)"
  testdb=$(./scripts/testdb.sh start)
  eval "$testdb"
elif [ "$TALKIDE_TEST_DATABASE_URL" = skip ]; then
  echo "== PostgreSQL: TALKIDE_TEST_DATABASE_URL=skip, the PostgreSQL tests are skipped"
fi

# The claude-code harness's end-to-end tests run the real Claude Code CLI:
# install the pinned version when it is missing (docs/harnesses.md).
if [ -z "${TALKIDE_CLAUDE_CODE_BIN:-}" ]; then
  echo "== Claude Code CLI (scripts/claude-code.sh)"
  TALKIDE_CLAUDE_CODE_BIN=$(./scripts/claude-code.sh)
fi
export TALKIDE_CLAUDE_CODE_BIN

# The web UI: its built assets are committed; rebuild them from the
# lockfile and fail when they differ (scripts/web.sh also installs the node
# modules the browser tests use). The browser tests drive Debian's Chromium
# (scripts/chromium.sh installs it) and fail, not skip, on CI without it.
echo "== web UI (scripts/web.sh --check)"
./scripts/web.sh --check
echo "== Chromium (scripts/chromium.sh)"
TALKIDE_CHROMIUM=$(./scripts/chromium.sh)
export TALKIDE_CHROMIUM TALKIDE_REQUIRE_BROWSER=1

if [ -n "${kube_pid:-}" ]; then
  echo "== kube-apiserver and etcd: waiting for scripts/kube-apiserver.sh"
  joined kube-apiserver.sh "$kube_pid"
  kube_pid=
  TALKIDE_KUBE_ASSETS=$(cat "$background/kube-assets")
fi
export TALKIDE_KUBE_ASSETS

# The real cluster's tests come last, but what it needs that takes long on
# a new machine (the node's Kubernetes binaries, the images' Debian
# userlands) is made beside go test, with only the CPU and disk time the
# tests leave idle. setsid puts the build in a scheduling group of its own
# when the kernel groups by session (autogroup, as on these machines), and
# nice then ranks it only inside that group: beside go test it took half
# the CPUs and doubled the test phase. So the group itself is made the
# lowest priority (/proc/self/autogroup) as well. Debian's packages are
# installed first, in the foreground, so that nothing touches the host's
# dpkg while go test runs.
if [ "${TALKIDE_CLUSTER:-}" != skip ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "test.sh: the tests on a real cluster need root (scripts/cluster.sh); TALKIDE_CLUSTER=skip skips them" >&2
    exit 1
  fi
  echo "== cluster: Debian's packages (scripts/cluster.sh packages)"
  ./scripts/cluster.sh packages
  echo "== cluster: its binaries and images, beside go test at idle priority (scripts/cluster.sh prepare)"
  cluster_up=1
  setsid bash -c 'if [ -w /proc/self/autogroup ]; then echo 19 >/proc/self/autogroup; fi
    exec nice -n 19 ionice -c 3 ./scripts/cluster.sh prepare' >"$background/cluster.sh prepare.log" 2>&1 &
  prepare_pid=$!
fi

# -race needs cgo and gcc, which these machines have. Fuzz targets run their
# seed corpora here; longer fuzzing is a separate command (docs/testing.md).
# The tests on a real cluster (e2e/cluster) run below, on their own.
# -timeout bounds a hung test binary, with room: cmd/talkide's whole-stack
# tests took 13-15 minutes beside the other packages on two CPUs, and 18
# with other work on the machine.
#
# With the cluster, the tests that drive Chromium (cmd/talkide's
# TestBrowser*, some five minutes) run later, beside the cluster's tests,
# which spend most of their time waiting for pods and leave more than half
# of the CPUs idle; the rest run here, beside the cluster's build.
later=
if [ -n "${cluster_up:-}" ]; then later='^TestBrowser'; fi
echo "== go test${later:+ (the browser tests later)}"
TALKIDE_CLUSTER=skip go test -race -count=1 -timeout 30m ${later:+-skip "$later"} ./...

# The platform on a real single-node Kubernetes cluster (scripts/cluster.sh):
# started after the other tests, since its pods take the machine's CPUs;
# its tests run; then it is taken down and a test checks that nothing of it
# is left. Needs root. TALKIDE_CLUSTER=skip skips it.
if [ "${TALKIDE_CLUSTER:-}" = skip ]; then
  echo "== cluster: TALKIDE_CLUSTER=skip, the tests on a real cluster are skipped"
else
  echo "== cluster: waiting for scripts/cluster.sh prepare"
  joined "cluster.sh prepare" "$prepare_pid"
  prepare_pid=
  # Started before the cluster's variables are set: these tests run the
  # platform on this machine and must not see the cluster.
  echo "== the browser tests (go test -run '$later' ./cmd/talkide), beside the cluster's start and tests"
  setsid go test -race -count=1 -timeout 30m -run "$later" ./cmd/talkide >"$background/browser tests.log" 2>&1 &
  browser_pid=$!
  echo "== cluster (scripts/cluster.sh up)"
  cluster_env=$(./scripts/cluster.sh up)
  eval "$cluster_env"
  export KUBECONFIG TALKIDE_NETNS TALKIDE_URL TALKIDE_TOKEN_FILE
  echo "== go test ./e2e/cluster"
  # -race here too, though nothing of the platform runs in this process: it
  # compiles as the tests above did, and reuses what they compiled.
  e2e=ok
  go test -race -count=1 -timeout 30m ./e2e/cluster || e2e=
  echo "== the browser tests: waiting for them"
  joined "browser tests" "$browser_pid"
  browser_pid=
  [ -n "$e2e" ] || { echo "test.sh: go test ./e2e/cluster failed" >&2; exit 1; }
  echo "== cluster down (scripts/cluster.sh down)"
  ./scripts/cluster.sh down
  cluster_up=
  TALKIDE_CLUSTER_DOWN=1 go test -race -count=1 -run TestDownLeftNothing ./e2e/cluster
fi
