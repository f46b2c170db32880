#!/usr/bin/env bash
# bench-ws-dynamodb.sh NODES [bench-ws flags...]
#
# Measures the WebSocket gateway on NODES nodes sharing one DynamoDB table,
# with every store request counted (docs/benchmarks.md, "What the gateway
# asks of DynamoDB"): a fresh in-memory dynoxide on 127.0.0.1:18400, `sluice
# dynamodb count-proxy` in front of it on 127.0.0.1:18399, NODES `sluice
# serve --store dynamodb` on 127.0.0.1:18401 up (through the proxy), and
# `sluice bench-ws --store-metrics` against them all.
#
# With bench-ws flags, one run with them. Without, the two standard runs,
# each on a fresh store and fresh nodes (bench-ws's tenant keeps the settings
# of its first run):
#   idle:     --idle 2000 --conns NODES --rate NODES --duration 5s --fanout 0 --burst 0 --idle-window 60s
#             (requests per connect; idle writes per second per node per 1,000 sessions)
#   messages: --idle 0 --conns 100 --rate 500 --duration 10s --fanout 100 --burst 0
#             (store requests per message; fan-out p50/p99 on the sender's node and the others)
#
# Everything listens on loopback only and is stopped on exit. The
# environment may set SLUICE (the binary; default: built into bin/sluice),
# DYNOXIDE (default: where `make deps` puts it), WORK (logs; default a
# new temporary directory, kept) and BASE (the store's port, default 18400:
# the proxy listens on BASE-1, the nodes on BASE+1 up).
set -euo pipefail

cd "$(dirname "$0")/.."
nodes=${1:?usage: $0 NODES [bench-ws flags...]}
shift
[[ $nodes =~ ^[1-9]$ ]] || { echo "NODES must be 1 to 9" >&2; exit 2; }

if [[ -z ${SLUICE:-} ]]; then
	go build -o bin/sluice ./cmd/sluice
	SLUICE=$PWD/bin/sluice
fi
DYNOXIDE=${DYNOXIDE:-$PWD/tools/node_modules/@dynoxide/linux-x64/dynoxide}
[[ -x $DYNOXIDE ]] || { echo "no dynoxide at $DYNOXIDE: run make deps" >&2; exit 2; }
WORK=${WORK:-$(mktemp -d -t bench-ws-dynamodb.XXXXXX)}
mkdir -p "$WORK"
export AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=x AWS_REGION=us-east-1 # dynoxide's, any will do

base=${BASE:-18400}
store=http://127.0.0.1:$base proxy=127.0.0.1:$((base - 1))
pids=()
stop() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	pids=()
}
trap stop EXIT
trap 'exit 130' INT TERM

# until URL: wait for an HTTP answer (any status) from URL, at most 30 s.
until_up() {
	for _ in $(seq 300); do
		curl -s -o /dev/null --max-time 1 "$1" && return 0
		sleep 0.1
	done
	echo "nothing answered at $1 within 30s; logs in $WORK" >&2
	exit 1
}

# free PORT...: fail if anything answers on a port, someone else's server
# that the run would measure instead of its own.
free() {
	for port in "$@"; do
		if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$port/"; then
			echo "127.0.0.1:$port is in use: stop what listens there, or set BASE" >&2
			exit 1
		fi
	done
}

# fresh RUN: stop what runs, then a new dynoxide, table, proxy and nodes.
urls=
fresh() {
	stop
	free $((base - 1)) $(seq $base $((base + nodes)))
	"$DYNOXIDE" serve --host 127.0.0.1 --port $base >"$WORK/$1-dynoxide.log" 2>&1 &
	pids+=($!)
	until_up $store
	"$SLUICE" dynamodb create-table --dynamodb-endpoint $store >/dev/null
	"$SLUICE" dynamodb count-proxy --listen $proxy --dynamodb-endpoint $store >"$WORK/$1-proxy.log" 2>&1 &
	pids+=($!)
	until_up "http://$proxy/metrics"
	printf 'defaults:\n  timeout: 500ms\n' >"$WORK/sluice.yaml"
	urls=
	for i in $(seq "$nodes"); do
		port=$((base + i))
		mkdir -p "$WORK/$1-node$i"
		"$SLUICE" serve --store dynamodb --dynamodb-endpoint "http://$proxy" --config "$WORK/sluice.yaml" \
			--addr 127.0.0.1:$port --data-dir "$WORK/$1-node$i" >"$WORK/$1-node$i.log" 2>&1 &
		pids+=($!)
		until_up "http://127.0.0.1:$port/healthz"
		urls=${urls:+$urls,}http://127.0.0.1:$port
	done
}

# bench RUN FLAGS...: one bench-ws run on a fresh store.
bench() {
	local run=$1
	shift
	fresh "$run"
	echo "== $run: sluice bench-ws --url $urls $* --store-metrics http://$proxy/metrics"
	"$SLUICE" bench-ws --url "$urls" "$@" --store-metrics "http://$proxy/metrics"
}

echo "$nodes node(s); $(nproc) cores; commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'); logs in $WORK"
if (($# > 0)); then
	bench run "$@"
else
	bench idle --idle 2000 --conns "$nodes" --rate "$nodes" --duration 5s --fanout 0 --burst 0 --idle-window 60s
	bench messages --idle 0 --conns 100 --rate 500 --duration 10s --fanout 100 --burst 0
fi
