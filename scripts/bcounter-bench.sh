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
def est(op, repr_, n):
    path = f"{root}/{op}/{repr_}/{n}/new/estimates.json"
    e = json.load(open(path))["mean"]
    ci = e["confidence_interval"]
    return ci["lower_bound"], e["point_estimate"], ci["upper_bound"]
def fmt(t):
    return "[" + " ".join(f"{x:.1f} ns" for x in t) + "]"
lines = ["# `bcounter` criterion microbenchmarks", "", "```", "scripts/bcounter-bench.sh", "```", "",
         f"git rev `{rev}`" + (" plus uncommitted changes in crates/bcounter" if dirty else "")
         + f" · {os.cpu_count()} cores · written {datetime.datetime.utcnow().isoformat(timespec='seconds')}Z · one thread.", "",
         "Replica 0 of n (lower bound; replica 0 holds almost all rights, the others have traded a little).",
         "`decrement`: local decrement by 1; `transfer`: transfer of 1 right; `merge`: merge another",
         "replica's message (full: whole state, n² + n numbers; compact: delta, 2n + 1 numbers);",
         "`message`: build that message. Criterion's mean with its confidence interval [low, mid, high]:", "",
         "| operation | n | full | compact | compact / full |", "| --- | --- | --- | --- | --- |"]
rows = []
for op in ["decrement", "transfer", "merge", "message"]:
    for n in [3, 5, 16]:
        full, compact = est(op, "full", n), est(op, "compact", n)
        ratio = compact[1] / full[1]
        lines.append(f"| {op} | {n} | {fmt(full)} | {fmt(compact)} | {ratio:.2f} |")
        rows.append({"operation": op, "n": n, "full_ns": full[1], "compact_ns": compact[1], "ratio": ratio})
open("bench/results/bcounter.md", "w").write("\n".join(lines) + "\n")
json.dump({"benchmark": "bcounter", "command": "scripts/bcounter-bench.sh", "git_rev": rev, "rows": rows},
          open("bench/results/bcounter.json", "w"), indent=2)
print("\n".join(lines))
PY
