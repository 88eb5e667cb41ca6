#!/usr/bin/env bash
# What one runtime per core would save: two gateways of one tokio worker each (each
# core with its own scheduler and I/O driver, as one current-thread runtime per core
# would have) against one gateway of two workers, in front of the same fixture. Both
# sides get the same load: two wrk processes of 16 connections each (in the first
# case one per gateway). Pass-through needs no state shared between the two, which is
# what makes the stand-in fair for this path only.
#
#   benches/wrk_two_runtimes.sh one2w|two1w
#
# Needs wrk and `cargo build --release --examples --bins`.
set -euo pipefail
mode=${1:?one2w or two1w}
cd "$(dirname "$0")/.."
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill $p 2>/dev/null || true; done; rm -rf "$work"' EXIT
target/release/examples/plain_server --listen 127.0.0.1:0 >"$work/fx" 2>&1 & pids+=($!)
for _ in $(seq 50); do grep -qs listening "$work/fx" && break; sleep 0.1; done
up=$(grep -o 'http://[^ ]*' "$work/fx")
start_gw() { # NAME WORKERS
  TOKIO_WORKER_THREADS=$2 target/release/mcp-task-gateway --listen 127.0.0.1:0 --upstream "$up" >"$work/$1" 2>&1 & pids+=($!)
  for _ in $(seq 50); do grep -qs '^listening on' "$work/$1" && break; sleep 0.1; done
}
if [ "$mode" = one2w ]; then
  start_gw g1 2; gws=(${pids[1]}); u1=$(grep '^listening on' "$work/g1" | grep -o 'http://[^ ]*'); u2=$u1
else
  start_gw g1 1; start_gw g2 1; gws=(${pids[1]} ${pids[2]})
  u1=$(grep '^listening on' "$work/g1" | grep -o 'http://[^ ]*'); u2=$(grep '^listening on' "$work/g2" | grep -o 'http://[^ ]*')
fi
curl -s -D "$work/h" -o /dev/null -X POST "$u1" -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
  -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
s=$(grep -i '^mcp-session-id:' "$work/h" | awk '{print $2}' | tr -d '\r')
cat >"$work/call.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}'
wrk.headers["content-type"] = "application/json"
wrk.headers["accept"] = "application/json, text/event-stream"
wrk.headers["mcp-protocol-version"] = "2025-11-25"
wrk.headers["mcp-session-id"] = "$s"
LUA
wrk -t1 -c16 -d1s -s "$work/call.lua" "$u1" >/dev/null & w=$!; wrk -t1 -c16 -d1s -s "$work/call.lua" "$u2" >/dev/null; wait $w
ticks() { local t=0; for p in "${gws[@]}"; do t=$((t + $(awk '{print $14 + $15}' /proc/$p/stat))); done; echo $t; }
t0=$(ticks)
wrk -t1 -c16 -d4s --latency -s "$work/call.lua" "$u1" >"$work/w1" & w=$!
wrk -t1 -c16 -d4s --latency -s "$work/call.lua" "$u2" >"$work/w2"; wait $w
t1=$(ticks)
r=$(( $(grep -o '[0-9]* requests in' "$work/w1" | awk '{print $1}') + $(grep -o '[0-9]* requests in' "$work/w2" | awk '{print $1}') ))
tick_us=$((1000000 / $(getconf CLK_TCK)))
echo "$mode requests=$r req/s=$((r / 4)) gateway_cpu_us/req=$(( (t1 - t0) * tick_us / r )) p50=$(grep ' 50%' "$work/w1" | awk '{print $2}')/$(grep ' 50%' "$work/w2" | awk '{print $2}')"
