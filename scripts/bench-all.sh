#!/usr/bin/env bash
# Regenerates every file under bench/results/ at the current commit, one benchmark
# at a time (run it on an otherwise idle machine; each writes its JSON, Markdown and
# PNG with the git rev, the machine and the exact command). About an hour on 2 cores.
#   scripts/bench-all.sh                 # all of them
#   scripts/bench-all.sh escrow resp     # only these
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo build --release --bin roost
all=(engine smartmart smartmart-goals transport resp escrow durability smallbank smallbank-postgres handover tatp voter bcounter commit_path call_cost)
chosen=("$@")
[ "${#chosen[@]}" -gt 0 ] || chosen=("${all[@]}")
for b in "${chosen[@]}"; do
  printf '\n==> %s (%s)\n' "$b" "$(date -u +%FT%TZ)"
  case "$b" in
    engine) target/release/roost bench engine ;;
    smartmart) target/release/roost bench smartmart --out bench/results ;;
    smartmart-goals) target/release/roost bench smartmart --goals --out bench/results/smartmart-goals ;;
    transport) target/release/roost bench transport --reps 5 ;;
    resp) target/release/roost bench resp ;;
    escrow) target/release/roost bench escrow ;;
    durability) target/release/roost bench durability ;;
    smallbank) target/release/roost bench smallbank ;;
    smallbank-postgres) target/release/roost bench smallbank --postgres ;;
    handover) target/release/roost bench handover ;;
    voter) target/release/roost bench voter ;;
    tatp) target/release/roost bench tatp ;;
    bcounter) scripts/bcounter-bench.sh ;;
    commit_path)
      echo "commit_path: cargo bench -p roost-storage --bench commit_path -- --quick;" \
        "copy criterion's estimates into bench/results/commit_path.md by hand"
      cargo bench -p roost-storage --bench commit_path -- --quick ;;
    call_cost)
      cargo build --release -p roost-reactor --example call_cost
      {
        printf '# call_cost\n\n```\ncargo run --release -p roost-reactor --example call_cost   # three times in a row\n```\n\n'
        printf 'git rev `%s` · %s cores · started %s\n\n```\n' "$(git rev-parse HEAD)" "$(nproc)" "$(date -u +%FT%TZ)"
        for _ in 1 2 3; do target/release/examples/call_cost; done
        printf '```\n'
      } > bench/results/call_cost.md ;;
    *) echo "unknown benchmark $b (one of: ${all[*]})" >&2; exit 2 ;;
  esac
done
