#!/usr/bin/env bash
# Latency, CPU, system calls and context switches per legacy `tools/call echo` under
# wrk load: straight to the fixture, or through a proxy in front of it (the gateway, or
# HAProxy in `mode http` as the reference of what a C proxy costs on the same machine).
# The CPU figures are the proxy's (the fixture's for `direct`).
#
#   benches/wrk_cpu.sh direct [CONNS]
#   benches/wrk_cpu.sh gateway [CONNS] [GATEWAY_BIN] [ENV=VALUE ...]
#   benches/wrk_cpu.sh haproxy [CONNS]
#   benches/wrk_cpu.sh socat [CONNS]   # a byte relay that parses nothing: the floor
#
# Needs wrk, perf, and haproxy or socat for those: `apt-get install wrk linux-perf haproxy socat`,
# and `cargo build --release -p mcp-task-gateway -p fixture-servers --bins`. Everything
# binds to 127.0.0.1 and is stopped by PID at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

proxy=${1:?direct, gateway, haproxy or socat}
conns=${2:-32}
gateway_bin=${3:-target/release/mcp-task-gateway}
extra_env=("${@:4}")
source benches/wrk_lib.sh
start_fixture
upstream_host=${upstream#http://}
upstream_host=${upstream_host%%/*}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

case "$proxy" in
  direct)
    pid=${pids[0]}
    url=$upstream
    ;;
  gateway)
    start_gateway "$gateway_bin" "$work/proxy.out" "${extra_env[@]}"
    pid=$gateway_pid
    url=$gateway_url
    ;;
  haproxy)
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
  socat)
    socat "TCP-LISTEN:$port,bind=127.0.0.1,fork,reuseaddr,nodelay" "TCP:$upstream_host,nodelay" &
    pid=$!
    url="http://127.0.0.1:$port/mcp"
    for _ in $(seq 50); do curl -s -o /dev/null "$url" && break; sleep 0.1; done
    ;;
  *) echo "unknown proxy: $proxy" >&2; exit 2 ;;
esac
case "$proxy" in haproxy | socat) pids+=("$pid") ;; esac

legacy_call_script "$url"

# utime, stime, and those of reaped children (socat forks one per connection).
cpu_ticks() { awk '{print $14 + $16, $15 + $17}' "/proc/$pid/stat"; }
children_reaped() {
  for _ in $(seq 100); do [ -z "$(pgrep -P "$pid")" ] && return 0; sleep 0.05; done
}
wrk -t1 -c"$conns" -d1s -s "$work/call.lua" "$url" >/dev/null # warm-up
children_reaped
read -r user0 sys0 < <(cpu_ticks)
# perf follows the threads there are; socat's per-connection children are not counted.
perf stat -e raw_syscalls:sys_enter,context-switches -x, -o "$work/perf" -p "$pid" -- sleep 4 &
perf_pid=$!
wrk -t1 -c"$conns" -d4s --latency -s "$work/call.lua" "$url" >"$work/wrk"
wait "$perf_pid"
children_reaped
read -r user1 sys1 < <(cpu_ticks)

requests=$(grep -o '[0-9]* requests in' "$work/wrk" | awk '{print $1}')
tick_us=$((1000000 / $(getconf CLK_TCK)))
python3 - "$proxy" "$conns" "$requests" "$((user1 - user0))" "$((sys1 - sys0))" "$tick_us" "$work/perf" "$work/wrk" <<'PY'
import sys
proxy, conns, requests, user, system, tick_us, perf, wrk = sys.argv[1:]
requests, user, system, tick_us = int(requests), int(user), int(system), int(tick_us)
# "<not counted>" where perf had no thread to follow (socat's parent only waits).
counts = {f[2]: float(f[0]) for f in (l.split(",") for l in open(perf) if l.count(",") > 2)
          if f[0].replace(".", "", 1).isdigit()}
lines = open(wrk).read().splitlines()
rate = next(l.split()[1] for l in lines if l.startswith("Requests/sec"))
def quantile(q):  # wrk prints e.g. "     50%  215.00us"
    value = next(l.split()[1] for l in lines if l.strip().startswith(q + "%"))
    for unit, ms in (("us", 1e-3), ("ms", 1.0), ("s", 1e3)):
        if value.endswith(unit):
            return float(value[: -len(unit)]) * ms
print(f"{proxy} conns={conns} requests={requests} req/s={rate} "
      f"p50_ms={quantile('50'):.3f} p99_ms={quantile('99'):.3f} "
      f"cpu_us/req={(user + system) * tick_us / requests:.1f} user_us/req={user * tick_us / requests:.1f} "
      + " ".join(f"{label}={counts[event] / requests:.2f}" if event in counts else f"{label}=n/a"
                 for label, event in (("syscalls/req", "raw_syscalls:sys_enter"),
                                      ("context_switches/req", "context-switches"))))
PY
