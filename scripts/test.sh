#!/usr/bin/env bash
# Roost's test command (the README's second command; `.ci/run` runs exactly this).
# Installs the Debian packages the tests need when they are missing, then runs
# formatting, lints, every crate's tests, the loom model checks of the commit core and
# of the executor, and every fuzz target for a bounded time.
# A test whose peer (redis-server, redis-cli, redis-py, etcd) is missing fails.
# ROOST_STRESS_MS bounds each concurrent stress scenario (default 1500 ms).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "scripts/install-deps.sh (Debian packages the tests need, when missing)"
scripts/install-deps.sh

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo test --workspace (release: the stress tests need real concurrency)"
cargo test --workspace --release

step "loom: model-check the real commit (engine and B+-tree on loom atomics; preemption bound 3, LOOM_MAX_PREEMPTIONS overrides)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test -p roost-storage --release --test loom_commit

step "loom: model-check the executor (mailbox, park/notify, remote wakes on loom atomics; preemption bound 5, LOOM_MAX_PREEMPTIONS overrides)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test -p roost-exec --release --test loom_exec

step "fuzz: every target for a bounded time (scripts/fuzz.sh; ROOST_FUZZ_SECONDS per target, default 15)"
scripts/fuzz.sh --seconds-per-target "${ROOST_FUZZ_SECONDS:-15}"

step "all tests passed"
