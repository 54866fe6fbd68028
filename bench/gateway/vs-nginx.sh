#!/bin/sh
# The gateway against nginx, as docs/benchmarks.md reports it: for each of
# REPEATS runs (default 3), one stream (c=1) and 64 streams at 5 ms per
# event, the modes direct, nginx, cp-nolimit and cp-limit interleaved in
# rounds. nginx (Debian nginx-light, installed when missing) and the
# talkide controlplane each run as a process of their own. Results go to
# $OUT (default ./bench-vs-nginx-<time>): the text and JSON of every run,
# and the tables against nginx on stdout.
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
modes=direct,nginx,cp-nolimit,cp-limit
nmodes=4
if [ -n "${BASE:-}" ]; then
	rm -rf "$out/base-src"
	mkdir -p "$out/base-src"
	git archive "$BASE" | tar -x -C "$out/base-src"
	(cd "$out/base-src" && go build -o ../talkide-base ./cmd/talkide)
	rm -rf "$out/base-src"
	modes=$modes,cp-limit-base
	nmodes=5
fi
i=1
while [ "$i" -le "$repeats" ]; do
	"$out/bench-gateway" -database "$db" -modes "$modes" -c 1 -n 4000 -rounds 8 ${SIM_APART:+-sim-apart} ${UPSTREAM_CPU:+-upstream-cpu "$UPSTREAM_CPU"} ${PROXY_CPU:+-proxy-cpu "$PROXY_CPU"} \
		-talkide "$out/talkide" ${BASE:+-talkide-base "$out/talkide-base"} -json "$out/serial-$i.json" >"$out/serial-$i.txt"
	"$out/bench-gateway" -database "$db" -modes "$modes" -c 64 -delta-delay 5ms -n 3200 -rounds 4 ${SIM_APART:+-sim-apart} ${UPSTREAM_CPU:+-upstream-cpu "$UPSTREAM_CPU"} ${PROXY_CPU:+-proxy-cpu "$PROXY_CPU"} \
		-talkide "$out/talkide" ${BASE:+-talkide-base "$out/talkide-base"} -json "$out/paced-$i.json" >"$out/paced-$i.txt"
	i=$((i + 1))
done
for f in "$out"/serial-*.txt "$out"/paced-*.txt; do
	echo "== $f"
	sed -n '/^-- against nginx/,/^$/p' "$f"
	grep -E '^ +(direct|nginx|cp-nolimit|cp-limit|cp-limit-base) ' "$f" | sed -n "1,${nmodes}p" | awk '{print "   " $1 ": other load " $(NF-1)}'
done
rm -f "$out/talkide" "$out/talkide-base" "$out/bench-gateway"
