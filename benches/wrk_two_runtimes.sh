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
# Needs wrk and `cargo build --release -p mcp-task-gateway -p fixture-servers --bins`;
# see benches/wrk_lib.sh.
set -euo pipefail
mode=${1:?one2w or two1w}
cd "$(dirname "$0")/.."
source benches/wrk_lib.sh
start_fixture
if [ "$mode" = one2w ]; then
  start_gateway target/release/mcp-task-gateway "$work/g1" TOKIO_WORKER_THREADS=2
  gws=("$gateway_pid"); u1=$gateway_url; u2=$gateway_url
else
  start_gateway target/release/mcp-task-gateway "$work/g1" TOKIO_WORKER_THREADS=1
  gws=("$gateway_pid"); u1=$gateway_url
  start_gateway target/release/mcp-task-gateway "$work/g2" TOKIO_WORKER_THREADS=1
  gws+=("$gateway_pid"); u2=$gateway_url
fi
legacy_call_script "$u1"
wrk -t1 -c16 -d1s -s "$work/call.lua" "$u1" >/dev/null & w=$!; wrk -t1 -c16 -d1s -s "$work/call.lua" "$u2" >/dev/null; wait $w
ticks() { local t=0; for p in "${gws[@]}"; do t=$((t + $(awk '{print $14 + $15}' /proc/$p/stat))); done; echo $t; }
t0=$(ticks)
wrk -t1 -c16 -d4s --latency -s "$work/call.lua" "$u1" >"$work/w1" & w=$!
wrk -t1 -c16 -d4s --latency -s "$work/call.lua" "$u2" >"$work/w2"; wait $w
t1=$(ticks)
r=$(( $(grep -o '[0-9]* requests in' "$work/w1" | awk '{print $1}') + $(grep -o '[0-9]* requests in' "$work/w2" | awk '{print $1}') ))
tick_us=$((1000000 / $(getconf CLK_TCK)))
echo "$mode requests=$r req/s=$((r / 4)) gateway_cpu_us/req=$(( (t1 - t0) * tick_us / r )) p50=$(grep ' 50%' "$work/w1" | awk '{print $2}')/$(grep ' 50%' "$work/w2" | awk '{print $2}')"
