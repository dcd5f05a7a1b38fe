#!/usr/bin/env bash
# The whole test suite, exactly what CI runs (.ci/run calls this).
#
# Sets up libtorch 2.11.0 and OpenMPI (scripts/exec-env.sh: fetched into
# $HOME/.cache/cephalo and installed from Debian on the first run only), then
# checks formatting and lints, and runs every test of the workspace with real
# execution compiled in (tch + MPI), then the crates that have features
# again without any (what a user without libtorch builds), plus the runnable
# examples. CI=true: a test whose data is missing fails.
set -euo pipefail
cd "$(dirname "$0")/.."
# A test whose data (../shared, libtorch, mpirun) is missing fails instead
# of skipping: the suite cannot pass by skipping.
export CI=true

# shellcheck source=scripts/system-deps.sh
. scripts/system-deps.sh
# shellcheck source=scripts/exec-env.sh
. scripts/exec-env.sh

echo "== cargo fmt --check" >&2
cargo fmt --all --check

echo "== cargo clippy (all targets, exec features) -D warnings" >&2
cargo clippy --workspace --all-targets --features exec -- -D warnings

echo "== cargo test (workspace, exec features)" >&2
cargo test --workspace --features exec --no-fail-fast 2>&1

# Only the crates whose code differs without features run again: the CLI
# (no profile / validate subcommands) and cephalo-exec's stub. cephalo-sim
# and cephalo-plots have no features: the pass above ran all their tests.
echo "== cargo test (cephalo and cephalo-exec, no features: the CLI without libtorch or MPI)" >&2
cargo test -p cephalo -p cephalo-exec --no-fail-fast 2>&1

echo "== examples (each asserts what it shows)" >&2
cargo run --quiet -p cephalo-sim --example simulate_paper_cluster

echo "== calibration cross-validation targets (release; slow in debug)" >&2
cargo test --release -p cephalo-sim --test it -- --ignored --exact perfmodel::cross_validation_targets 2>&1

echo "== cargo doc (warnings denied)" >&2
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
