#!/usr/bin/env bash
# The service benchmark of docs/benchmarks.md: `sluice bench` at 50 workers
# against, side by side and in rounds, the net/http floor (bench/floor), the
# memory store, and the pebble store with a durable (1-minute) and a short
# (1-second, memory-only) policy. Loopback only; about two minutes.
#
# Each run prints what `sluice bench` measured (the server's CPU per
# decision among it) and the load generator's own CPU per decision, from
# its rusage: it shares the machine's cores with the server, and is kept
# out of the server's figure.
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o bin/sluice ./cmd/sluice
(cd bench && go build -o ../bin/floor ./floor)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME URL [FLAGS...]: one `sluice bench` run, with its own CPU.
run() {
  local name=$1 url=$2
  shift 2
  echo "== round $round $name"
  local TIMEFORMAT='%3U %3S'
  { time ./bin/sluice bench --url "$url" --workers 50 --keys 1000 --duration 10s "$@" >"$tmp/out" 2>"$tmp/err"; } 2>"$tmp/time" || { cat "$tmp/out" "$tmp/err"; return 1; }
  cat "$tmp/out"
  awk 'NR == FNR { if ($1 == "requests") n = $2; next }
       n > 0 { printf "load generator CPU %.1f µs per decision\n", ($1 + $2) / n * 1e6 }' "$tmp/out" "$tmp/time"
}

for round in 1 2 3; do
  ./bin/floor 127.0.0.1:18095 & FP=$!; sleep 0.5
  run floor http://127.0.0.1:18095
  kill $FP; wait $FP 2>/dev/null || true
  ./bin/sluice serve --addr 127.0.0.1:18090 --store memory 2>/dev/null & SP=$!; sleep 1
  run memory http://127.0.0.1:18090
  kill $SP; wait $SP
  D=$(mktemp -d); ./bin/sluice serve --addr 127.0.0.1:18090 --data-dir $D 2>/dev/null & SP=$!; sleep 1
  run pebble-durable http://127.0.0.1:18090
  run pebble-short http://127.0.0.1:18090 --policy '{"name":"fast","algorithm":"token_bucket","limit":1000,"window":"1s"}'
  kill $SP; wait $SP; rm -rf $D
done
