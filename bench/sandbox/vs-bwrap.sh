#!/bin/sh
# The sandbox's cost per command against bubblewrap, its peer, as
# docs/benchmarks.md reports it: Debian's bubblewrap is installed when it
# is missing and this is root (without it the benchmark leaves the peer's
# row out), then internal/sandbox's BenchmarkCommand runs COUNT times
# (default 3), N commands a row (default 300), every row interleaved in
# each run: bare, each layer with each helper, cold helpers, and bwrap.
#
#   ./bench/sandbox/vs-bwrap.sh
#   N=50 COUNT=1 ./bench/sandbox/vs-bwrap.sh
set -eu
cd "$(dirname "$0")/../.."
if ! command -v bwrap >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "vs-bwrap: installing Debian's bubblewrap, the peer" >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap >&2 ||
			{ apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap >&2; }
	else
		echo "vs-bwrap: bwrap is missing and cannot be installed here (root with apt-get): the peer's row is left out" >&2
	fi
fi
exec go test -run XXX -bench 'BenchmarkCommand$' -benchtime "${N:-300}x" -count "${COUNT:-3}" ./internal/sandbox/
