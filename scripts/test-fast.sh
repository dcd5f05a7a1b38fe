#!/usr/bin/env bash
# The fast tier of the suite, for developers: the library's and the CLI's
# tests (cephalo-sim and cephalo, release build, no libtorch or MPI), with
# formatting checked first. What it leaves to `scripts/test.sh` (the whole
# suite, what CI runs): clippy, real execution (exec features: libtorch,
# OpenMPI, Slurm), the crates without features again, the examples, the
# calibration cross-validation targets, the golden study outputs and the
# docs. Tests that read ../shared or need libtorch skip here unless
# CI=true is set.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check" >&2
cargo fmt --all --check

echo "== library and CLI tests (release)" >&2
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --release -p cephalo-sim -p cephalo --no-fail-fast
else
    cargo test --release -p cephalo-sim -p cephalo --no-fail-fast
fi
