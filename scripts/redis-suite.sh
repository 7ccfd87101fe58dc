#!/usr/bin/env bash
# Redis's own test suite against one Roost node, beside redis-server run
# through the same suite (issue 20). The suite is the tests/ of the Redis
# release that matches the installed redis-server (7.0.15 on Debian 12),
# fetched at set-up time into a scratch folder and never committed. Each
# unit runs with runtest's external-server mode:
#
#   ./runtest --host 127.0.0.1 --port P --singledb --ignore-encoding --durable
#             --single UNIT --tags -needs:debug ...
#
# and the per-unit pass counts, and every Roost failure with its reason, go
# to bench/results/redis-suite.md (and .json). A unit stops at its first
# exception (a command Roost refuses outside an assertion), so the share of
# passing tests is counted against redis-server's passes in the same run.
#
# Usage: scripts/redis-suite.sh [--src DIR] [--roost BIN] [--units "U1 U2 .."]
#                               [--out DIR] [--unit-timeout S]
#   --src DIR     a Redis source tree (with runtest and tests/) instead of
#                 fetching one (git clone --depth 1 --branch $REDIS_TAG)
#   --roost BIN   the roost binary (default: builds target/release/roost)
#   --units       the units to run (default: the issue's eleven)
#   --out DIR     where the results go (default: bench/results)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

REDIS_TAG=${REDIS_TAG:-7.0.15}
REDIS_REPO=${REDIS_REPO:-https://github.com/redis/redis}
SRC=""
ROOST_BIN=""
OUT="$ROOT/bench/results"
UNIT_TIMEOUT=600
export SUITE_ARGS="$*"
UNITS="unit/type/incr unit/type/string unit/type/list unit/type/hash unit/type/set unit/type/zset unit/expire unit/keyspace unit/multi unit/scripting unit/functions"
while [ $# -gt 0 ]; do
  case "$1" in
    --src) SRC=$2; shift 2 ;;
    --roost) ROOST_BIN=$2; shift 2 ;;
    --units) UNITS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --unit-timeout) UNIT_TIMEOUT=$2; shift 2 ;;
    *) echo "redis-suite: unknown argument $1" >&2; exit 2 ;;
  esac
done

need() {
  command -v "$1" >/dev/null 2>&1 || {
    echo "redis-suite: $1 is missing: $2" >&2
    exit 1
  }
}
need redis-server "scripts/install-deps.sh installs redis-server"
need tclsh "apt-get install tcl (the suite is Tcl)"
need python3 "apt-get install python3"

SCRATCH=${ROOST_SUITE_DIR:-${TMPDIR:-/tmp}/roost-redis-suite}
mkdir -p "$SCRATCH"
if [ -z "$SRC" ]; then
  SRC="$SCRATCH/redis-$REDIS_TAG"
  if [ ! -x "$SRC/runtest" ]; then
    need git "apt-get install git"
    echo "redis-suite: fetching Redis $REDIS_TAG's tests from $REDIS_REPO"
    rm -rf "$SRC"
    git clone --quiet --depth 1 --branch "$REDIS_TAG" "$REDIS_REPO" "$SRC"
  fi
fi
[ -x "$SRC/runtest" ] || { echo "redis-suite: no runtest in $SRC" >&2; exit 1; }

if [ -z "$ROOST_BIN" ]; then
  cargo build --release --bin roost
  # A copy: a build during the run must not change the server under test.
  cp target/release/roost "$SCRATCH/roost"
  ROOST_BIN="$SCRATCH/roost"
fi

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

wait_port() {
  for _ in $(seq 1 100); do
    if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),0.2)" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "redis-suite: nothing listens on $1" >&2
  exit 1
}

REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
  --logfile "$SCRATCH/redis-server.log" &
PIDS+=($!)
ROOST_PORT=$(free_port)
"$ROOST_BIN" resp --port "$ROOST_PORT" >"$SCRATCH/roost.log" 2>&1 &
PIDS+=($!)
wait_port "$REDIS_PORT"
wait_port "$ROOST_PORT"

# Tags whose tests need what an external server cannot give (DEBUG,
# replication, config-only features); runtest skips `external:skip` itself.
TAGS=(--tags -needs:debug --tags -needs:repl --tags -needs:config-maxmemory
      --tags -needs:save --tags -needs:reset --tags -needs:pfdebug)

LOGS="$SCRATCH/logs"
rm -rf "$LOGS" && mkdir -p "$LOGS"
for unit in $UNITS; do
  for server in redis-server roost; do
    port=$REDIS_PORT
    [ "$server" = roost ] && port=$ROOST_PORT
    log="$LOGS/$server-$(echo "$unit" | tr / _).log"
    echo "redis-suite: $unit against $server"
    (cd "$SRC" && timeout "$UNIT_TIMEOUT" ./runtest --host 127.0.0.1 --port "$port" \
      --singledb --ignore-encoding --durable --single "$unit" "${TAGS[@]}") >"$log" 2>&1 || true
  done
done

mkdir -p "$OUT"
python3 - "$LOGS" "$OUT" "$REDIS_TAG" "$UNITS" "$(redis-server --version)" "$(git rev-parse --short HEAD)" <<'PY'
import json, os, re, sys
logs, out, tag, units, redis_version, commit = sys.argv[1:7]
units = units.split()
ansi = re.compile(r"\x1b\[[0-9;]*m")

def parse(path):
    res = {"ok": 0, "err": 0, "exception": 0, "ignore": 0, "skip": 0, "failures": []}
    if not os.path.exists(path):
        res["failures"].append(("(no log)", "the unit did not run"))
        return res
    lines = [ansi.sub("", l.rstrip("\n")) for l in open(path, errors="replace")]
    for i, line in enumerate(lines):
        m = re.match(r"^\[(ok|err|exception|ignore|skip)\]: (.*)$", line)
        if not m:
            continue
        kind, rest = m.groups()
        res[kind] += 1
        if kind in ("err", "exception"):
            name = re.sub(r" in tests/.*$", "", rest).strip()
            reason = ""
            for nxt in lines[i + 1:i + 4]:
                if nxt.strip() and not nxt.startswith("["):
                    reason = nxt.strip()
                    break
            if kind == "exception":
                name, reason = "(exception: the rest of the unit did not run)", rest.strip()
            res["failures"].append((name, reason[:240]))
    if not any(re.match(r"^\[(ok|err|exception|ignore|skip)\]", l) for l in lines):
        res["failures"].append(("(no test ran)", (lines[-1] if lines else "")[:240]))
    return res

rows, total_redis, total_roost = [], 0, 0
for unit in units:
    key = unit.replace("/", "_")
    redis = parse(os.path.join(logs, f"redis-server-{key}.log"))
    roost = parse(os.path.join(logs, f"roost-{key}.log"))
    share = roost["ok"] / redis["ok"] if redis["ok"] else 0.0
    total_redis += redis["ok"]
    total_roost += min(roost["ok"], redis["ok"])
    rows.append({"unit": unit, "redis_ok": redis["ok"], "redis_err": redis["err"] + redis["exception"],
                 "roost_ok": roost["ok"], "roost_err": roost["err"], "roost_exception": roost["exception"],
                 "share": share, "roost_failures": roost["failures"], "redis_failures": redis["failures"]})

cmd = "scripts/redis-suite.sh " + " ".join(os.environ.get("SUITE_ARGS", "").split())
with open(os.path.join(out, "redis-suite.json"), "w") as f:
    json.dump({"redis_tag": tag, "redis_server": redis_version, "roost_commit": commit,
               "command": cmd.strip(), "units": rows}, f, indent=1)
md = [f"# Redis's own test suite against Roost (issue 20)", "",
      f"Command: `{cmd.strip()}` at roost {commit}; the suite is Redis {tag}'s `tests/` "
      f"(fetched at set-up, not committed), run by its `runtest` in external-server mode "
      f"(`--singledb --ignore-encoding --durable`, without the tests tagged needs:debug, "
      f"needs:repl, needs:config-maxmemory, needs:save, needs:reset, needs:pfdebug) against "
      f"one `roost resp` node and against `{redis_version.split(' sha=')[0]}` in the same run.",
      "",
      "A unit stops at its first exception (a command Roost refuses outside an assertion), "
      "so the share is Roost's passes over redis-server's passes. Goal: at least 90% per unit.",
      "",
      "| unit | redis-server ok | roost ok | roost failed | roost exception | share |",
      "| --- | ---: | ---: | ---: | ---: | ---: |"]
for r in rows:
    md.append(f"| {r['unit']} | {r['redis_ok']} | {r['roost_ok']} | {r['roost_err']} | "
              f"{r['roost_exception']} | {100*r['share']:.0f}% |")
md.append(f"| **all** | {total_redis} | {total_roost} | | | "
          f"{100*total_roost/max(total_redis,1):.0f}% |")
md += ["", "## Roost's failures", ""]
for r in rows:
    if not r["roost_failures"]:
        continue
    md.append(f"### {r['unit']}")
    md.append("")
    for name, reason in r["roost_failures"]:
        md.append(f"- {name}: `{reason}`" if reason else f"- {name}")
    md.append("")
if any(r["redis_failures"] for r in rows):
    md += ["## redis-server's own failures (environment)", ""]
    for r in rows:
        for name, reason in r["redis_failures"]:
            md.append(f"- {r['unit']}: {name}: `{reason}`")
with open(os.path.join(out, "redis-suite.md"), "w") as f:
    f.write("\n".join(md) + "\n")
print("\n".join(md[:len(rows) + 12]))
PY
