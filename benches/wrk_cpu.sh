#!/usr/bin/env bash
# CPU, system calls and context switches per legacy `tools/call echo` through a proxy
# in front of the fixture, under wrk load: the gateway, or HAProxy (`mode http`) as the
# reference of what a C proxy costs on the same machine.
#
#   benches/wrk_cpu.sh gateway [CONNS] [GATEWAY_BIN] [ENV=VALUE ...]
#   benches/wrk_cpu.sh haproxy [CONNS]
#
# Needs wrk, perf and (for haproxy) haproxy: `apt-get install wrk linux-perf haproxy`,
# and `cargo build --release --examples --bins`. Everything binds to 127.0.0.1 and is
# stopped by PID at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

proxy=${1:?gateway or haproxy}
conns=${2:-32}
gateway_bin=${3:-target/release/mcp-task-gateway}
extra_env=("${@:4}")
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

wait_for_line() { # FILE PATTERN
  for _ in $(seq 100); do grep -q "$2" "$1" && return 0; sleep 0.1; done
  echo "no '$2' in $1" >&2
  exit 1
}

target/release/examples/plain_server --listen 127.0.0.1:0 >"$work/fixture.out" 2>&1 &
pids+=($!)
wait_for_line "$work/fixture.out" listening
upstream=$(grep -o 'http://[^ ]*' "$work/fixture.out")

case "$proxy" in
  gateway)
    env "${extra_env[@]}" "$gateway_bin" --listen 127.0.0.1:0 --upstream "$upstream" \
      >"$work/proxy.out" 2>&1 &
    pid=$!
    wait_for_line "$work/proxy.out" '^listening on'
    url=$(grep '^listening on' "$work/proxy.out" | grep -o 'http://[^ ]*')
    ;;
  haproxy)
    upstream_host=${upstream#http://}
    upstream_host=${upstream_host%%/*}
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    cat >"$work/haproxy.cfg" <<CFG
global
  nbthread 2
defaults
  mode http
  option http-keep-alive
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend in
  bind 127.0.0.1:$port
  default_backend fixture
backend fixture
  server fixture $upstream_host
CFG
    haproxy -f "$work/haproxy.cfg" -db >"$work/proxy.out" 2>&1 &
    pid=$!
    url="http://127.0.0.1:$port/mcp"
    for _ in $(seq 50); do curl -s -o /dev/null "$url" && break; sleep 0.1; done
    ;;
  *) echo "unknown proxy: $proxy" >&2; exit 2 ;;
esac
pids+=("$pid")

curl -s -D "$work/headers" -o /dev/null -X POST "$url" \
  -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
  -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"wrk_cpu","version":"1"}}}'
session=$(grep -i '^mcp-session-id:' "$work/headers" | awk '{print $2}' | tr -d '\r')
cat >"$work/call.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}'
wrk.headers["content-type"] = "application/json"
wrk.headers["accept"] = "application/json, text/event-stream"
wrk.headers["mcp-protocol-version"] = "2025-11-25"
wrk.headers["mcp-session-id"] = "$session"
LUA

cpu_ticks() { awk '{print $14, $15}' "/proc/$pid/stat"; }
wrk -t1 -c"$conns" -d1s -s "$work/call.lua" "$url" >/dev/null # warm-up
read -r user0 sys0 < <(cpu_ticks)
perf stat -e raw_syscalls:sys_enter,context-switches -x, -o "$work/perf" -p "$pid" -- sleep 4 &
perf_pid=$!
wrk -t1 -c"$conns" -d4s -s "$work/call.lua" "$url" >"$work/wrk"
wait "$perf_pid"
read -r user1 sys1 < <(cpu_ticks)

requests=$(grep -o '[0-9]* requests in' "$work/wrk" | awk '{print $1}')
tick_us=$((1000000 / $(getconf CLK_TCK)))
python3 - "$proxy" "$conns" "$requests" "$((user1 - user0))" "$((sys1 - sys0))" "$tick_us" "$work/perf" "$work/wrk" <<'PY'
import sys
proxy, conns, requests, user, system, tick_us, perf, wrk = sys.argv[1:]
requests, user, system, tick_us = int(requests), int(user), int(system), int(tick_us)
counts = {line.split(",")[2]: float(line.split(",")[0]) for line in open(perf) if line.count(",") > 2}
rate = next(l.split()[1] for l in open(wrk) if l.startswith("Requests/sec"))
print(f"{proxy} conns={conns} requests={requests} req/s={rate} "
      f"cpu_us/req={(user + system) * tick_us / requests:.1f} user_us/req={user * tick_us / requests:.1f} "
      f"syscalls/req={counts.get('raw_syscalls:sys_enter', 0) / requests:.2f} "
      f"context_switches/req={counts.get('context-switches', 0) / requests:.2f}")
PY
