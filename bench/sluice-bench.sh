#!/usr/bin/env bash
# The service benchmark of docs/benchmarks.md: `sluice bench` at 50 workers
# against, side by side and in rounds, the net/http and grpc-go floors
# (bench/floor), the memory store, and the pebble store with a durable
# (1-minute) and a short (1-second, memory-only) policy, over HTTP, and the
# memory and pebble stores over gRPC (Envoy's rate limit service, `sluice
# bench --grpc`). Loopback only; about four minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o bin/sluice ./cmd/sluice
(cd bench && go build -o ../bin/floor ./floor)
for round in 1 2 3; do
  ./bin/floor 127.0.0.1:18095 127.0.0.1:18096 & FP=$!; sleep 0.5
  echo "== round $round floor"; ./bin/sluice bench --url http://127.0.0.1:18095 --workers 50 --keys 1000 --duration 10s
  echo "== round $round floor-grpc"; ./bin/sluice bench --url http://127.0.0.1:18095 --grpc 127.0.0.1:18096 --workers 50 --keys 1000 --duration 10s
  kill $FP; wait $FP 2>/dev/null || true # killed by SIGTERM: not a failure under set -e
  ./bin/sluice serve --addr 127.0.0.1:18090 --grpc-addr 127.0.0.1:18091 --envoy-config bench/envoy --store memory 2>/dev/null & SP=$!; sleep 1
  echo "== round $round memory"; ./bin/sluice bench --url http://127.0.0.1:18090 --workers 50 --keys 1000 --duration 10s
  echo "== round $round memory-grpc"; ./bin/sluice bench --url http://127.0.0.1:18090 --grpc 127.0.0.1:18091 --workers 50 --keys 1000 --duration 10s
  kill $SP; wait $SP
  D=$(mktemp -d); ./bin/sluice serve --addr 127.0.0.1:18090 --grpc-addr 127.0.0.1:18091 --envoy-config bench/envoy --data-dir $D 2>/dev/null & SP=$!; sleep 1
  echo "== round $round pebble-durable"; ./bin/sluice bench --url http://127.0.0.1:18090 --workers 50 --keys 1000 --duration 10s
  echo "== round $round pebble-short"; ./bin/sluice bench --url http://127.0.0.1:18090 --workers 50 --keys 1000 --duration 10s --policy '{"name":"fast","algorithm":"token_bucket","limit":1000,"window":"1s"}'
  echo "== round $round pebble-durable-grpc"; ./bin/sluice bench --url http://127.0.0.1:18090 --grpc 127.0.0.1:18091 --workers 50 --keys 1000 --duration 10s
  kill $SP; wait $SP; rm -rf $D
done
