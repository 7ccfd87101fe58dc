#!/usr/bin/env bash
# redis-cli and redis-benchmark against `roost resp`: commands, errors,
# MULTI/EXEC, a pipe, and a pipelined benchmark that must lose no INCR.
# With ROOST_RESP_PORT set, uses the server already listening there (the
# cargo test `external_clients` does this); otherwise starts
# `target/release/roost resp` on a free port and stops it at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in redis-cli redis-benchmark; do
  if ! command -v "$tool" >/dev/null; then
    echo "FAIL: $tool is not installed (Debian: redis-tools; scripts/install-deps.sh installs it)" >&2
    exit 1
  fi
done

server_pid=""
if [ -z "${ROOST_RESP_PORT:-}" ]; then
  log=$(mktemp)
  target/release/roost resp --port 0 >"$log" 2>&1 &
  server_pid=$!
  trap 'kill "$server_pid" 2>/dev/null || true; rm -f "$log"' EXIT
  for _ in $(seq 100); do
    grep -q "listening on" "$log" && break
    sleep 0.05
  done
  ROOST_RESP_PORT=$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$log")
fi
cli() { redis-cli -p "$ROOST_RESP_PORT" "$@"; }

failures=0
expect() {
  local want=$1; shift
  local got
  got=$(cli "$@" 2>&1)
  if [ "$got" != "$want" ]; then
    echo "FAIL: redis-cli $*: expected [$want], got [$got]"
    failures=$((failures + 1))
  fi
}

expect PONG PING
expect OK SET cli:k hello
expect hello GET cli:k
expect 1 INCR cli:n
expect 11 INCRBY cli:n 10
expect 2 RPUSH cli:l a b
expect "$(printf 'a\nb')" LRANGE cli:l 0 -1
expect 1 HSET cli:h f v
expect "$(printf 'f\nv')" HGETALL cli:h
expect "WRONGTYPE Operation against a key holding the wrong kind of value" GET cli:l
expect "ERR unknown command 'nosuch', with args beginning with: 'x' " nosuch x
expect "ERR wrong number of arguments for 'get' command" GET
expect OK BC.CREATE cli:stock LOWER 0 5
expect 2 BC.DEC cli:stock 3
# Registered functions (the shipped library `roost`).
expect OK MSET cli:a 10 cli:b 0
expect "$(printf '6\n4')" FCALL transfer 2 cli:a cli:b 4
expect "ERR insufficient funds: 6 < 7" FCALL transfer 2 cli:a cli:b 7
expect 10 FCALL_RO sum 2 cli:a cli:b
expect "ERR Can not execute a script with write flag using *_ro command." FCALL_RO transfer 2 cli:a cli:b 1

# MULTI/EXEC through one redis-cli session (stdin).
got=$(printf 'MULTI\nINCR cli:m\nINCR cli:m\nEXEC\n' | cli)
want=$(printf 'OK\nQUEUED\nQUEUED\n1\n2')
[ "$got" = "$want" ] || { echo "FAIL: MULTI/EXEC: got [$got]"; failures=$((failures + 1)); }

# Mass insertion with --pipe (the Redis protocol on stdin).
for i in $(seq 1000); do printf 'SET cli:pipe:%d %d\r\n' "$i" "$i"; done | cli --pipe >/dev/null
expect 1000 GET cli:pipe:1000

# redis-benchmark (pipelined, 20 clients) drives it too; its INCRs all hit one
# key (no -r), so the counter must equal the number of requests: none lost.
cli DEL counter:__rand_int__ >/dev/null
out=$(redis-benchmark -p "$ROOST_RESP_PORT" -t set,get,incr -n 20000 -P 16 -c 20 -q --csv 2>/dev/null)
for cmd in SET GET INCR; do
  echo "$out" | grep -q "^\"$cmd\",\"[1-9]" || { echo "FAIL: redis-benchmark $cmd: [$out]"; failures=$((failures + 1)); }
done
expect 20000 GET counter:__rand_int__
expect 1 EXISTS key:__rand_int__

# INFO is readable by redis-cli.
cli INFO stats | grep -q '^total_commands_processed:' || { echo "FAIL: INFO stats"; failures=$((failures + 1)); }

if [ "$failures" -ne 0 ]; then
  echo "$failures redis-cli checks failed"
  exit 1
fi
echo "redis-cli checks passed"
