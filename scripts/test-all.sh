#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what is missing (redis-server and
# redis-sentinel from Debian's packages), checks formatting, lints and docs, then runs every
# test and doc example.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1 \
  || ! command -v redis-sentinel >/dev/null 2>&1; then
  step "installing redis-server, redis-tools and redis-sentinel (Debian packages)"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server redis-tools redis-sentinel >/dev/null
fi
redis-server --version

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings denied)"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo clippy without default features (no Redis backend compiled in)"
cargo clippy -p dlock --no-default-features --all-targets -- -D warnings

step "cargo doc (warnings denied)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

step "tests"
if command -v cargo-nextest >/dev/null 2>&1; then
  cargo nextest run --workspace --profile ci
else
  cargo test --workspace --tests
fi

step "doc examples"
cargo test --workspace --doc

step "the in-process backend's tests without default features"
cargo test -p dlock --no-default-features --test memory_manual --test memory_real --test wait_queue -q
