#!/usr/bin/env bash
# Two gateway binaries on the same load-harness scenarios, alternating ABBA, then the
# medians of each side (docs/benchmarks.md, run 22). Build both sides with the same
# cargo command: each command resolves its own feature set for shared dependencies.
#
#   benches/ab_gateways.sh OUT.txt BEFORE_BIN AFTER_BIN [ROUNDS] [SCENARIOS]
#   e.g. benches/ab_gateways.sh /tmp/ab.txt /tmp/gw-before target/release/mcp-task-gateway 3 a,c
# AB_ARGS replaces the harness flags after the scenarios (default: --concurrency 16
# --no-redis); e.g. AB_ARGS="--concurrency 16 --duration 5" for scenario b on Redis too.
set -euo pipefail
out=$1 before=$2 after=$3 rounds=${4:-3} scenarios=${5:-a,c}
read -r -a harness_args <<<"${AB_ARGS:---concurrency 16 --no-redis}"
cd "$(dirname "$0")/.."
: >"$out"
for round in $(seq 1 "$rounds"); do
  if [ $((round % 2)) = 1 ]; then order="A B"; else order="B A"; fi
  for side in $order; do
    bin=$before
    [ "$side" = B ] && bin=$after
    echo "### round $round side $side ($bin)" >>"$out"
    cargo bench --bench load -- --scenarios "$scenarios" "${harness_args[@]}" \
      --gateway-bin "$bin" --out-dir target/bench-ab 2>&1 |
      grep '^|' | grep -v '^|---\|^| variant' >>"$out"
  done
done
python3 - "$out" <<'PY'
import collections, re, statistics, sys
rows, side = collections.defaultdict(list), None
for line in open(sys.argv[1]):
    m = re.match(r"### round \d+ side (\w)", line)
    if m:
        side = m.group(1)
        continue
    c = [x.strip() for x in line.strip().strip("|").split("|")]
    num = lambda v: float(v) if v not in ("—", "") else float("nan")
    # req/s, p50, p99, gateway CPU, load generator CPU, Redis CPU
    rows[(c[0], c[1], side)].append(
        (num(c[4]), num(c[5]), num(c[7]), num(c[9]), num(c[13]), num(c[11])))
print(f"{'variant':45s} {'conns':>5s} side {'req/s':>8s} {'p50 ms':>7s} {'p99 ms':>7s} {'gw µs':>6s} {'lg µs':>6s} {'redis µs':>8s}")
for variant, conns in sorted({(v, c) for v, c, _ in rows}):
    for s in ("A", "B"):
        runs = rows.get((variant, conns, s))
        if runs:
            m = [statistics.median(r[i] for r in runs) for i in range(6)]
            print(f"{variant[:45]:45s} {conns:>5s} {s:>4s} {m[0]:8.0f} {m[1]:7.3f} {m[2]:7.3f} {m[3]:6.1f} {m[4]:6.1f} {m[5]:8.1f}  ({len(runs)} runs)")
PY
