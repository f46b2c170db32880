#!/usr/bin/env bash
# The durable path of docs/benchmarks.md (issue 28): `sluice bench` at 50
# workers over 10,000 keys against, side by side and in rounds, the net/http
# floor (bench/floor), the memory store, and the pebble store with a
# one-second window (memory only), a one-hour window synced before each
# answer (the default), and the one-hour window written behind every 100ms
# and every second (--write-behind). Loopback only; about five minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o bin/sluice ./cmd/sluice
(cd bench && go build -o ../bin/floor ./floor)
hour='{"name":"hourly","algorithm":"fixed_window","limit":1000000000,"window":"1h"}'
second='{"name":"second","algorithm":"fixed_window","limit":1000000000,"window":"1s"}'
run() { # name, policy
  echo "== round $round $1"
  ./bin/sluice bench --url http://127.0.0.1:18090 --workers 50 --keys 10000 --duration 10s --policy "$2"
}
serve() { # store args...
  ./bin/sluice serve --addr 127.0.0.1:18090 "$@" 2>/dev/null & SP=$!
  for _ in $(seq 100); do curl -sf http://127.0.0.1:18090/healthz >/dev/null && return; sleep 0.1; done
  echo "sluice did not start" >&2; exit 1
}
for round in 1 2 3; do
  ./bin/floor 127.0.0.1:18090 127.0.0.1:18096 & FP=$!; sleep 0.5
  run floor "$hour"
  kill $FP; wait $FP 2>/dev/null || true # killed by SIGTERM: not a failure under set -e
  serve --store memory; run memory "$hour"; kill $SP; wait $SP
  D=$(mktemp -d); serve --data-dir "$D"
  run pebble-1s "$second"; run pebble-1h-sync "$hour"
  kill $SP; wait $SP; rm -rf "$D"
  for every in 100ms 1s; do
    D=$(mktemp -d); serve --data-dir "$D" --write-behind $every
    run pebble-1h-behind-$every "$hour"
    kill $SP; wait $SP; rm -rf "$D"
  done
done
