#!/usr/bin/env bash
# Runs the Bounded Counter microbenchmarks and writes bench/results/bcounter.md
# from criterion's estimates (target/criterion/<op>/<repr>/<n>/new/estimates.json).
#   scripts/bcounter-bench.sh            # criterion's --quick run
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench -p roost-bcounter --bench bcounter -- --quick >/dev/null
rev=$(git rev-parse HEAD)
dirty=$(git status --porcelain crates/bcounter | head -1)
python3 - "$rev" "$dirty" <<'PY'
import json, os, sys, datetime
rev, dirty = sys.argv[1], sys.argv[2]
root = "target/criterion"
def estimates(op, repr_, n):
    return json.load(open(f"{root}/{op}/{repr_}/{n}/new/estimates.json"))
def est(op, repr_, n):
    e = estimates(op, repr_, n)["mean"]
    ci = e["confidence_interval"]
    return ci["lower_bound"], e["point_estimate"], ci["upper_bound"]
started = datetime.datetime.utcnow().isoformat(timespec='seconds') + "Z"
def row(op, repr_, n):
    """A row in the results format of every `roost bench` (DESIGN.md)."""
    low, mean, high = est(op, repr_, n)
    median = estimates(op, repr_, n)["median"]["point_estimate"]
    return {"system": "roost", "variant": repr_, "params": {"op": op, "replicas": n},
            "throughput_tps": 1e9 / mean,
            "latency_us": {"mean": mean / 1e3, "p50": median / 1e3, "p99": None, "p999": None},
            "abort_rate": 0.0,
            "extra": {"criterion_estimate_ns": [round(low, 3), round(mean, 3), round(high, 3)],
                      "mean_ns": mean, "median_ns": median, "threads": 1,
                      "latency_note": "criterion measures batches of iterations, not single operations: "
                      "mean and p50 are criterion's mean and median per-iteration estimates; "
                      "p99 and p999 are not measured (null)"}}
def fmt(t):
    return "[" + " ".join(f"{x:.1f} ns" for x in t) + "]"
lines = ["# `bcounter` criterion microbenchmarks", "", "```", "scripts/bcounter-bench.sh", "```", "",
         f"git rev `{rev}`" + (" plus uncommitted changes in crates/bcounter" if dirty else "")
         + f" · {os.cpu_count()} cores · written {started} · one thread.", "",
         "Replica 0 of n (lower bound; replica 0 holds almost all rights, the others have traded a little).",
         "`decrement`: local decrement by 1; `transfer`: transfer of 1 right; `merge`: merge another",
         "replica's message (full: whole state, n² + n numbers; compact: delta, 2n + 1 numbers);",
         "`message`: build that message. Criterion's mean with its confidence interval [low, mid, high]:", "",
         "A `--quick` run on a shared 2-core machine: a single cell moves by up to about 50% between",
         "runs (another process taking a core for a moment); merge's compact/full ratio (0.1 at n = 16)",
         "holds in every run.", "",
         "| operation | n | full | compact | compact / full |", "| --- | --- | --- | --- | --- |"]
rows = []
for op in ["decrement", "transfer", "merge", "message"]:
    for n in [3, 5, 16]:
        full, compact = est(op, "full", n), est(op, "compact", n)
        ratio = compact[1] / full[1]
        lines.append(f"| {op} | {n} | {fmt(full)} | {fmt(compact)} | {ratio:.2f} |")
        rows += [row(op, "full", n), row(op, "compact", n)]
open("bench/results/bcounter.md", "w").write("\n".join(lines) + "\n")
memory_gib = int(open("/proc/meminfo").readline().split()[1]) / (1 << 20)
json.dump({"benchmark": "bcounter", "command": "scripts/bcounter-bench.sh", "git_rev": rev,
           "machine": {"cores": os.cpu_count(), "memory_gib": round(memory_gib, 1)},
           "started_at": started, "rows": rows},
          open("bench/results/bcounter.json", "w"), indent=2)
print("\n".join(lines))
PY
