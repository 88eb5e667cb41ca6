#!/usr/bin/env bash
# A local multi-instance mcp-task-gateway, without containers: one redis-server, the example
# plain MCP server as the upstream, and N gateways (default 3) on consecutive ports, all sharing
# the Redis. Prints the URLs, then runs until Ctrl-C, which stops everything it started.
#
#   deploy/local-cluster.sh [extra gateway flags...]
#   GATEWAYS=5 BASE_PORT=18080 deploy/local-cluster.sh --tool-policy slow=required
#
# Environment:
#   GATEWAYS   number of gateways (default 3)
#   BASE_PORT  port of the first gateway (default: the first run of free ports from 18080)
#   LOG_DIR    where the logs go (default: a new directory under ${TMPDIR:-/tmp})
#
# Needs redis-server (Debian: apt-get install redis-server), cargo and curl. The binaries are
# built once (release) and then run directly rather than through `cargo run`, so each PID this
# script kills is the process itself and nothing is left behind.
set -euo pipefail
cd "$(dirname "$0")/.."

gateways="${GATEWAYS:-3}"
log_dir="${LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/mtg-local-cluster.XXXXXX")}"
mkdir -p "$log_dir"

for tool in redis-server cargo curl; do
  if ! command -v "$tool" >/dev/null; then
    echo "local-cluster: $tool is needed" >&2
    exit 1
  fi
done
if ! [[ "$gateways" =~ ^[1-9][0-9]*$ ]]; then
  echo "local-cluster: GATEWAYS must be a positive integer, got '$gateways'" >&2
  exit 1
fi

pids=()
names=()
# shellcheck disable=SC2317  # called through the trap
cleanup() {
  trap - EXIT INT TERM
  if [ "${#pids[@]}" -gt 0 ]; then
    echo
    echo "stopping ${#pids[@]} processes..."
    # Newest first: gateways, then the upstream, then Redis.
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
      kill -TERM "${pids[i]}" 2>/dev/null || true
    done
    # Give the gateways time to drain, then make sure.
    for _ in $(seq 1 100); do
      alive=0
      for pid in "${pids[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then alive=1; fi
      done
      [ "$alive" = 0 ] && break
      sleep 0.1
    done
    for pid in "${pids[@]}"; do
      kill -KILL "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
  fi
  echo "logs: $log_dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start NAME LOGFILE COMMAND...: run COMMAND in the background and remember its PID.
start() {
  local name="$1" log="$2"
  shift 2
  "$@" >"$log" 2>&1 &
  pids+=("$!")
  names+=("$name")
}

# Whether something accepts TCP connections on 127.0.0.1:PORT.
port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# A port nobody listens on (a connection to it is refused).
port_free() {
  ! port_open "$1"
}

free_port() {
  local port
  for _ in $(seq 1 200); do
    port=$((20000 + RANDOM % 40000))
    if port_free "$port"; then
      echo "$port"
      return
    fi
  done
  echo "local-cluster: no free port found" >&2
  return 1
}

# wait_until SECONDS PID DESCRIPTION LOG COMMAND...: poll COMMAND until it succeeds; fail
# early, showing LOG, if PID died.
wait_until() {
  local seconds="$1" pid="$2" what="$3" log="$4"
  shift 4
  for _ in $(seq 1 $((seconds * 10))); do
    if "$@" >/dev/null 2>&1; then
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "local-cluster: $what exited; last lines of $log:" >&2
      tail -n 20 "$log" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "local-cluster: $what not ready after ${seconds}s; last lines of $log:" >&2
  tail -n 20 "$log" >&2
  return 1
}

echo "building (release)..."
cargo build --release --quiet -p mcp-task-gateway -p fixture-servers \
  --bin mcp-task-gateway --bin plain_server
target_dir="$(cargo metadata --format-version 1 --no-deps \
  | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
gateway_bin="$target_dir/release/mcp-task-gateway"
upstream_bin="$target_dir/release/plain_server"

# Redis: nothing on disk, loopback only.
redis_port="$(free_port)"
redis_url="redis://127.0.0.1:$redis_port"
start redis "$log_dir/redis.log" \
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$log_dir"
wait_until 10 "${pids[-1]}" "redis-server" "$log_dir/redis.log" port_open "$redis_port"

# The upstream picks its own port and prints `listening on http://127.0.0.1:PORT/mcp`.
start upstream "$log_dir/upstream.log" "$upstream_bin" --listen 127.0.0.1:0
upstream_url_printed() {
  grep -m1 -o 'http://[^ ]*' "$log_dir/upstream.log"
}
wait_until 10 "${pids[-1]}" "plain_server" "$log_dir/upstream.log" upstream_url_printed
upstream_url="$(upstream_url_printed)"

# Gateways on consecutive ports.
if [ -n "${BASE_PORT:-}" ]; then
  base_port="$BASE_PORT"
else
  base_port=18080
  while :; do
    all_free=1
    for ((i = 0; i < gateways; i++)); do
      if ! port_free $((base_port + i)); then
        all_free=0
        base_port=$((base_port + i + 1))
        break
      fi
    done
    [ "$all_free" = 1 ] && break
    if [ "$base_port" -gt 65000 ]; then
      echo "local-cluster: no run of $gateways free ports found" >&2
      exit 1
    fi
  done
fi

# One key for every gateway: a held call's retry may reach any of them.
MTG_REQUEST_STATE_KEY="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export MTG_REQUEST_STATE_KEY
for ((i = 0; i < gateways; i++)); do
  port=$((base_port + i))
  start "gateway-$i" "$log_dir/gateway-$i.log" \
    "$gateway_bin" \
    --listen "127.0.0.1:$port" \
    --upstream "$upstream_url" \
    --redis "$redis_url" \
    --instance-id "gateway-$i" \
    --advertise-url "http://127.0.0.1:$port" \
    "$@"
done
for ((i = 0; i < gateways; i++)); do
  port=$((base_port + i))
  # pids: redis, upstream, then the gateways in order.
  wait_until 30 "${pids[$((i + 2))]}" "gateway-$i" "$log_dir/gateway-$i.log" \
    curl -fsS --max-time 1 "http://127.0.0.1:$port/healthz"
done

echo
echo "redis:     $redis_url"
echo "upstream:  $upstream_url"
for ((i = 0; i < gateways; i++)); do
  echo "gateway-$i: http://127.0.0.1:$((base_port + i))/mcp"
done
echo "logs:      $log_dir"
echo "Ctrl-C stops all of them."

# Run until Ctrl-C, or until one of the processes exits on its own.
set +e
wait -n "${pids[@]}"
status=$?
set -e
for idx in "${!pids[@]}"; do
  if ! kill -0 "${pids[idx]}" 2>/dev/null; then
    echo "local-cluster: ${names[idx]} exited (status $status); stopping the rest" >&2
    echo "last lines of its log:" >&2
    tail -n 20 "$log_dir/${names[idx]}.log" >&2 || true
    break
  fi
done
exit 1
