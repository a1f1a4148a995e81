#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what is missing (redis-server and
# redis-sentinel, postgresql, and etcd-server with etcd-client, from Debian's packages), checks
# formatting, lints and docs, then runs every test and doc example.
#
# Every step runs, whatever the steps before it did; the summary at the end gives each step's
# result and time, and the script exits non-zero if any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."

started=$SECONDS
summary=()
failures=0

# `1m05s`, `42s`: a number of seconds, for the summary.
duration() {
  if [ "$1" -ge 60 ]; then printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); else printf '%ds' "$1"; fi
}

# step NAME COMMAND...: runs COMMAND, and records whether it passed and how long it took.
step() {
  local name=$1 start=$SECONDS result=pass
  shift
  printf '\n==> %s\n' "$name"
  if ! "$@"; then
    result=FAIL
    failures=$((failures + 1))
  fi
  summary+=("$(printf '%-4s  %7s  %s' "$result" "$(duration $((SECONDS - start)))" "$name")")
}

# Installs the Debian packages named (one `apt-get update`, one install for all of them).
install_packages() {
  local sudo=sudo
  if [ "$(id -u)" -eq 0 ]; then sudo=""; fi
  $sudo apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

# Where initdb and postgres are (Debian keeps them off the PATH).
postgres_bindir() {
  local dir
  dir=$(pg_config --bindir 2>/dev/null) && [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ] &&
    { echo "$dir"; return 0; }
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ]; then echo "$dir"; return 0; fi
  done
  return 1
}

# A CI run builds from nothing: incremental compilation's caches would never be read, and
# writing them made the test build a tenth longer (2m31s against 2m16s on 2 CPUs). A developer's
# machine keeps them.
if [ -n "${CI:-}" ] && [ -z "${CARGO_INCREMENTAL:-}" ]; then
  export CARGO_INCREMENTAL=0
fi

# Every backend, TLS and the async surface (the tests' package and the benchmarks' forward each
# to the library): the default features are the Redis backend alone.
features=(--features dlock-tests/postgres,dlock-tests/etcd,dlock-tests/tls,dlock-tests/async,dlock-bench/etcd,dlock-bench/async)

run_tests() {
  if command -v cargo-nextest >/dev/null 2>&1; then
    cargo nextest run --workspace "${features[@]}" --profile ci
  else
    cargo test --workspace "${features[@]}" --tests
  fi
}

# The servers the tests start: redis-server (and redis-sentinel, redis-cli), PostgreSQL's
# initdb and postgres, etcd (and etcdctl), faketime for a stepped clock, and nftables and
# iproute2 for the partitions; what is missing is installed in one go.
missing=()
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1 \
  || ! command -v redis-sentinel >/dev/null 2>&1; then
  missing+=(redis-server redis-tools redis-sentinel)
fi
postgres_bindir >/dev/null || missing+=(postgresql)
if ! command -v etcd >/dev/null 2>&1 || ! command -v etcdctl >/dev/null 2>&1; then
  missing+=(etcd-server etcd-client)
fi
# A PostgreSQL server's stepped clock: libfaketime.
if ! command -v faketime >/dev/null 2>&1; then
  missing+=(faketime)
fi
# The partitions between servers: network namespaces (`ip netns`) with nftables drop rules.
if ! command -v nft >/dev/null 2>&1; then
  missing+=(nftables)
fi
if ! command -v ip >/dev/null 2>&1; then
  missing+=(iproute2)
fi
if [ ${#missing[@]} -gt 0 ]; then
  step "install ${missing[*]} (Debian packages)" install_packages "${missing[@]}"
fi
redis-server --version
"$(postgres_bindir)/postgres" --version
etcd --version | head -1

step "cargo fmt --check" cargo fmt --all -- --check
step "cargo clippy (all targets, warnings denied)" \
  cargo clippy --workspace --all-targets "${features[@]}" -- -D warnings
step "cargo clippy with the default features (the Redis backend alone)" \
  cargo clippy -p dlocks -p dlock-tests --all-targets -- -D warnings
# Every target without default features (no Redis backend compiled in) compiles, the in-process
# backend's tests among them; they run with the others below: no backend feature changes how
# the engine or the in-process backend is compiled (no crate enables a feature of dlock-core).
step "cargo clippy without default features (no Redis backend compiled in)" \
  cargo clippy -p dlocks -p dlock-tests --no-default-features --all-targets -- -D warnings
step "cargo doc (warnings denied)" \
  env RUSTDOCFLAGS="-D warnings" cargo doc --workspace "${features[@]}" --no-deps --quiet
step "tests" run_tests
step "doc examples" cargo test --workspace "${features[@]}" --doc
# Every published crate packages, with every file its build reads (scripts/check-packages.sh:
# the compiler's dep-info of the test build against `cargo package --list`, in place of
# building each crate again from its package).
step "cargo package (every published crate packages what its build reads)" \
  bash scripts/check-packages.sh

printf '\n==> summary\n'
printf '%s\n' "${summary[@]}"
printf 'total time: %s; ' "$(duration $((SECONDS - started)))"
if [ "$failures" -gt 0 ]; then
  printf '%d of %d steps failed\n' "$failures" "${#summary[@]}"
  exit 1
fi
printf 'all %d steps passed\n' "${#summary[@]}"
