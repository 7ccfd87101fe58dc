#!/usr/bin/env bash
# A/B of `roost resp` settings against redis-server, paired per repetition:
# starts redis-server and one `roost resp` per config file given, runs
# redis-benchmark (-t set,get,incr -P 16 -n 200000 -r 100000 -c 50) against
# each in turn, REPS times, and prints for each config the median over
# repetitions of its rate over Redis's in the same repetition.
#
#   scripts/resp-ab.sh CONFIG.toml...      (REPS=11 by default)
#
# Each config must set its own `bind` port. Needs redis-server and
# redis-benchmark; builds nothing (uses target/release/roost).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-11}
ROOST=target/release/roost
REDIS_PORT=$((20000 + RANDOM % 20000))
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
redis-server --port "$REDIS_PORT" --save '' --appendonly no >/dev/null 2>&1 &
pids+=($!)
ports=("$REDIS_PORT")
for config in "$@"; do
  "$ROOST" resp --config "$config" >/dev/null 2>&1 &
  pids+=($!)
  ports+=("$(sed -n 's/^bind *= *"[^:]*:\([0-9]*\)".*/\1/p' "$config")")
done
sleep 1
out=$(mktemp)
for rep in $(seq "$REPS"); do
  for port in "${ports[@]}"; do
    rates=$(redis-benchmark -p "$port" -t set,get,incr -P 16 -n 200000 -r 100000 -c 50 -q --csv 2>/dev/null \
      | tr -d '"' | awk -F, 'NR>1{printf "%s=%s ", $1, $2}')
    echo "$rep $port $rates" >> "$out"
  done
done
python3 - "$REDIS_PORT" "$out" "$@" <<'PY'
import collections, statistics, sys
base, path, configs = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = collections.defaultdict(dict)
for line in open(path):
    rep, port, *rates = line.split()
    rows[rep][port] = {k: float(v) for k, v in (r.split("=") for r in rates)}
ports = [p for p in next(iter(rows.values())) if p != base]
for config, port in zip(configs, ports):
    out = []
    for cmd in ("SET", "GET", "INCR"):
        ratios = [r[port][cmd] / r[base][cmd] for r in rows.values()
                  if cmd in r.get(port, {}) and cmd in r.get(base, {})]
        out.append(f"{cmd} {statistics.median(ratios):.3f}")
    print(f"{config} (port {port}): median ratio to redis per repetition: " + ", ".join(out))
PY
rm -f "$out"
