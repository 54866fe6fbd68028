#!/bin/sh
# The gateway against nginx, as docs/benchmarks.md reports it: for each of
# REPEATS runs (default 3), one stream (c=1) and then each count of
# STREAMS (default "64 256 1024") of streams paced at PACE (default 5ms)
# per event, the modes MODES (default direct,nginx,cp-limit) interleaved
# in rounds. 5 ms is four times a fast model's pace; PACE=20ms is about
# that pace (some 50 events a second per stream).
# nginx (Debian nginx-light, installed when missing) and the talkide
# controlplane each run as a process of their own. Results go to $OUT
# (default ./bench-vs-nginx-<time>): the text and JSON of every run, and
# the tables against nginx on stdout.
#
# A paced run sends 8 calls per stream and mode (at least 3,200), in 4
# rounds, after a warm-up of one call per stream (at least 200); a phase
# that takes longer than PHASE_LIMIT (default 5m) is cut, and its calls
# still running count as errors.
#
# With BASE=<git revision>, the control-plane built from that revision
# runs beside the tree's, and cp-limit-base goes through it in the same
# rounds: a change measured against the tree before it, in one run. Its
# store is made and seeded by this tree, so BASE must have the same
# store schema (its control-plane refuses a newer one and says so).
#
# With SIM_APART=1 the simulator runs as a process of its own
# (-sim-apart) rather than beside the client in the benchmark's process.
#
# With UPSTREAM_CPU=<n> the simulator runs apart on CPU n alone
# (-upstream-cpu), as the model's servers take no CPU from the gateway;
# with PROXY_CPU=<n>, nginx and the control-planes run on CPU n alone
# (-proxy-cpu), as a gateway has its machine to itself. The benchmark's
# client, and whatever was given no CPU, run on the CPUs left.
#
#   ./bench/gateway/vs-nginx.sh            # 3 repeats, SQLite
#   STREAMS="64 256" MODES=direct,nginx,cp-nolimit,cp-limit ./bench/gateway/vs-nginx.sh 1
#   PACE=20ms STREAMS=256 ./bench/gateway/vs-nginx.sh 3
#   DATABASE=postgres://… ./bench/gateway/vs-nginx.sh 1
#   BASE=HEAD~1 ./bench/gateway/vs-nginx.sh 3
#   SIM_APART=1 ./bench/gateway/vs-nginx.sh 3
#   UPSTREAM_CPU=0 ./bench/gateway/vs-nginx.sh 3
#   SIM_APART=1 PROXY_CPU=1 ./bench/gateway/vs-nginx.sh 3
set -eu
cd "$(dirname "$0")/../.."
repeats=${1:-3}
db=${DATABASE:-sqlite}
out=${OUT:-bench-vs-nginx-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
go build -o "$out/talkide" ./cmd/talkide
go build -o "$out/bench-gateway" ./bench/gateway
modes=${MODES:-direct,nginx,cp-limit}
streams=${STREAMS:-64 256 1024}
limit=${PHASE_LIMIT:-5m}
pace=${PACE:-5ms}
if [ -n "${BASE:-}" ]; then
	rm -rf "$out/base-src"
	mkdir -p "$out/base-src"
	git archive "$BASE" | tar -x -C "$out/base-src"
	(cd "$out/base-src" && go build -o ../talkide-base ./cmd/talkide)
	rm -rf "$out/base-src"
	modes=$modes,cp-limit-base
fi
nmodes=$(echo "$modes" | tr ',' '\n' | wc -l)
run() { # NAME, then the benchmark's flags
	name=$1
	shift
	"$out/bench-gateway" -database "$db" -modes "$modes" -phase-limit "$limit" "$@" \
		${SIM_APART:+-sim-apart} ${UPSTREAM_CPU:+-upstream-cpu "$UPSTREAM_CPU"} ${PROXY_CPU:+-proxy-cpu "$PROXY_CPU"} \
		-talkide "$out/talkide" ${BASE:+-talkide-base "$out/talkide-base"} -json "$out/$name.json" >"$out/$name.txt" ||
		echo "$name: the benchmark failed (a request failed, or see above); the next run goes on" >&2
}
i=1
while [ "$i" -le "$repeats" ]; do
	run "serial-$i" -c 1 -n 4000 -rounds 8
	for c in $streams; do
		n=$((8 * c))
		[ "$n" -ge 3200 ] || n=3200
		w=$c
		[ "$w" -ge 200 ] || w=200
		run "paced-c$c-$i" -c "$c" -delta-delay "$pace" -n "$n" -warmup "$w" -rounds 4
	done
	i=$((i + 1))
done
for f in "$out"/serial-*.txt "$out"/paced-*.txt; do
	echo "== $f"
	sed -n '/^-- against nginx/,/^$/p' "$f"
	grep -E '^ +(direct|nginx|go-floor|cp-nolimit|cp-limit|cp-nolimit-base|cp-limit-base) ' "$f" | sed -n "1,${nmodes}p" | awk '{print "   " $1 ": other load " $(NF-1) ", errors " $NF}'
done
rm -f "$out/talkide" "$out/talkide-base" "$out/bench-gateway"
