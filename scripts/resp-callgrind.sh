#!/usr/bin/env bash
# Instructions per request of the RESP server under callgrind (robust to a
# noisy machine, unlike wall-clock numbers): builds the bare server example,
# runs it under valgrind, and for each of SET, GET, INCR zeroes the counters,
# runs redis-benchmark against it and dumps them. Then prints Ir/request and
# the top functions of each dump (scripts/callgrind-by-function.py).
#
#   scripts/resp-callgrind.sh [OUT_DIR] [REQUESTS]
#
# Needs valgrind (callgrind_control) and redis-benchmark. The executors'
# spin budgets are set to 0: an idle executor's spin loop would otherwise
# count as instructions of the requests. See bench/results/resp-profile.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-target/resp-callgrind}
N=${2:-200000}
TARGET=${CARGO_TARGET_DIR:-target}
cargo build --release -p roost-resp --example resp_server
mkdir -p "$OUT"
rm -f "$OUT"/cg.out*
printf 'bind = "127.0.0.1:0"\nspin_before_park_us = 0\nspin_while_active_us = 0\n' > "$OUT/nospin.toml"
PORT=$((20000 + RANDOM % 20000))
valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.out" --dump-instr=no \
  "$TARGET/release/examples/resp_server" --port "$PORT" --config "$OUT/nospin.toml" \
  > "$OUT/server.log" 2>&1 &
VG=$!
trap 'kill $VG 2>/dev/null || true' EXIT
for _ in $(seq 1 240); do
  redis-cli -p "$PORT" ping > /dev/null 2>&1 && break
  sleep 0.5
done
i=0
for cmd in set get incr; do
  i=$((i + 1))
  callgrind_control -z "$VG" > /dev/null
  redis-benchmark -p "$PORT" -t "$cmd" -n "$N" -P 16 -r 100000 -c 50 -q > "$OUT/bench.$cmd.txt" 2>&1
  callgrind_control -d "$cmd" "$VG" > /dev/null
  echo "== ${cmd^^} ($OUT/cg.out.$i)"
  python3 scripts/callgrind-by-function.py "$OUT/cg.out.$i" "$N" 15
done
