#!/usr/bin/env bash
# A --gateway-wrap for a heap-profiling gateway (`--features dhat-heap`, run 17): runs
# the gateway with a dhat file of its own in $DHAT_DIR (default /tmp), and once it holds
# $WANT established sockets (its upstream calls and clients), sends it SIGUSR2 at once,
# which writes the profile: its peak is then the heap with the tasks in flight, not a
# later burst such as the teardown's (run 32).
#
#   cargo bench --bench load -- --scenarios m --in-flight 2000 \
#     --gateway-bin DHAT_BUILD --gateway-wrap benches/dhat_snapshot.sh
#   benches/dhat_by_component.py /tmp/dhat-PID.json 2100
set -euo pipefail
export MTG_DHAT_FILE="${DHAT_DIR:-/tmp}/dhat-$$.json"
me=$$
want="${WANT:-2100}"
(
  while kill -0 "$me" 2>/dev/null; do
    held=$(ss -tnpH state established 2>/dev/null | grep -c "pid=$me," || true)
    if [ "$held" -ge "$want" ]; then
      kill -USR2 "$me"
      break
    fi
    sleep 0.05
  done
) &
exec "$@"
