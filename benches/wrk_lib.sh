# Shared by the wrk bench scripts (sourced, not run): a work directory and the
# processes to stop by PID at exit, the fixture upstream, and a legacy session with the
# wrk script that calls `echo` in it. Run from the repository root.

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

wait_for_line() { # FILE PATTERN
  for _ in $(seq 100); do grep -qs "$2" "$1" && return 0; sleep 0.1; done
  echo "no '$2' in $1" >&2
  exit 1
}

# Starts the fixture; sets `upstream` to its /mcp URL.
start_fixture() {
  target/release/plain_server --listen 127.0.0.1:0 >"$work/fixture.out" 2>&1 &
  pids+=($!)
  wait_for_line "$work/fixture.out" listening
  upstream=$(grep -o 'http://[^ ]*' "$work/fixture.out")
}

# Starts a gateway (extra arguments: environment, KEY=VALUE) in front of the fixture,
# its output in FILE; sets `gateway_pid` and `gateway_url`.
start_gateway() { # BIN FILE [ENV=VALUE ...]
  env "${@:3}" "$1" --listen 127.0.0.1:0 --upstream "$upstream" >"$2" 2>&1 &
  gateway_pid=$!
  pids+=("$gateway_pid")
  wait_for_line "$2" '^listening on'
  gateway_url=$(grep '^listening on' "$2" | grep -o 'http://[^ ]*')
}

# Opens a legacy session through URL and writes $work/call.lua, a legacy
# `tools/call echo` in that session.
legacy_call_script() { # URL
  curl -s -D "$work/headers" -o /dev/null -X POST "$1" \
    -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"wrk","version":"1"}}}'
  local session
  session=$(grep -i '^mcp-session-id:' "$work/headers" | awk '{print $2}' | tr -d '\r')
  cat >"$work/call.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}'
wrk.headers["content-type"] = "application/json"
wrk.headers["accept"] = "application/json, text/event-stream"
wrk.headers["mcp-protocol-version"] = "2025-11-25"
wrk.headers["mcp-session-id"] = "$session"
LUA
}
