#!/usr/bin/env bash
# Builds every libFuzzer target of fuzz/ on stable rustc and runs each for a
# bounded time; exits non-zero if any target finds a crash (a panic, a failed
# assertion, a timeout or running out of memory).
#
#   scripts/fuzz.sh                               # CI: 15 s per target
#   scripts/fuzz.sh --seconds-per-target 600      # longer, on demand
#   scripts/fuzz.sh resp_parse net_frame          # some targets only
#
# Measured from scratch on the 2-core machine (shared, load 2-3): build
# 216 s, then 9 targets x 15 s; 6 min 0 s in all.
#
# Coverage guidance without nightly: rustc's stable -C flags run LLVM's
# SanitizerCoverage pass (inline 8-bit counters, PC table, comparison
# tracing) that libFuzzer reads; `--cfg fuzzing` as cargo-fuzz sets it. No
# sanitizer: the code is safe Rust, and a panic aborts the run as a crash.
# `--target <host>` keeps the flags off build scripts and proc macros.
#
# Each target reads its committed seeds (fuzz/corpus/<target>/) and past
# findings (fuzz/regressions/<target>/) and writes what it discovers to
# fuzz/work/<target>/ (kept between local runs, ignored by git); a crashing
# input lands in fuzz/artifacts/<target>/. Keep a finding, once fixed, as
# fuzz/regressions/<target>/<what-it-was>: `cargo test -p roost-fuzz`
# replays every such file through the same check without libFuzzer.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=15
targets=()
usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds-per-target)
      [ $# -ge 2 ] || { echo "fuzz.sh: --seconds-per-target needs a number" >&2; exit 2; }
      seconds="$2"
      shift 2
      ;;
    --seconds-per-target=*) seconds="${1#*=}"; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz.sh: --seconds-per-target must be a positive whole number, got '$seconds'" >&2
  exit 2
fi

mapfile -t all < <(sed -n 's/^name = "\([a-z_]*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^roost')
if [ "${#targets[@]}" -eq 0 ]; then
  targets=("${all[@]}")
fi
for t in "${targets[@]}"; do
  if ! printf '%s\n' "${all[@]}" | grep -qx "$t"; then
    echo "fuzz.sh: no target '$t' (targets: ${all[*]})" >&2
    exit 2
  fi
done

host="$(rustc -vV | sed -n 's/^host: //p')"
export RUSTFLAGS="-Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares \
--cfg fuzzing -Cdebug-assertions -Coverflow-checks"
# The targets' build must not pick up a wrapper or flags meant for the
# workspace build.
unset RUSTC_WRAPPER CARGO_BUILD_RUSTFLAGS CARGO_ENCODED_RUSTFLAGS
build_start=$(date +%s)
bins=()
for t in "${targets[@]}"; do bins+=(--bin "$t"); done
# Their own target directory, whatever CARGO_TARGET_DIR says: the
# instrumented builds must not mix with the workspace's, and the runs below
# look for them there.
cargo build --release --locked --manifest-path fuzz/Cargo.toml --target "$host" \
  --target-dir fuzz/target "${bins[@]}"
echo "fuzz.sh: built ${#targets[@]} targets in $(( $(date +%s) - build_start )) s"

failed=()
for t in "${targets[@]}"; do
  mkdir -p "fuzz/work/$t" "fuzz/artifacts/$t"
  dirs=("fuzz/work/$t" "fuzz/corpus/$t")
  [ -d "fuzz/regressions/$t" ] && dirs+=("fuzz/regressions/$t")
  log="fuzz/artifacts/$t/last-run.log"
  echo "fuzz.sh: $t for $seconds s"
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: memory that
  # grows with the input is a finding too.
  if "fuzz/target/$host/release/$t" \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
      -artifact_prefix="fuzz/artifacts/$t/" -print_final_stats=1 \
      "${dirs[@]}" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    echo "fuzz.sh: $t ok: $runs runs, $speed/s, $cov"
  else
    failed+=("$t")
    echo "fuzz.sh: $t FAILED; the end of its log ($log):" >&2
    tail -n 40 "$log" >&2
    ls fuzz/artifacts/"$t"/ | grep -v last-run.log | sed "s|^|  fuzz/artifacts/$t/|" >&2 || true
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz.sh: crashes in: ${failed[*]}" >&2
  echo "fuzz.sh: fix them, then keep each input under fuzz/regressions/<target>/" >&2
  exit 1
fi
echo "fuzz.sh: ${#targets[@]} targets, $seconds s each, no crash"
