#!/usr/bin/env bash
# Installs the peer lock libraries for the dlock benchmark into local folders, on demand:
#   benches/peers/.venv         Python venv with the pins in requirements.txt (redis-py, python-redis-lock)
#   benches/peers/node_modules  npm ci from package-lock.json (redlock, ioredis)
#   benches/peers/rust/target   release build of rslock-peer from rust/Cargo.lock (rslock)
# Idempotent: each step is skipped when its artefacts are already there and current.
# Usage: bash benches/peers/setup.sh   (from any directory)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"
# Everything this script and the installers print goes to stderr: stdout stays free for callers.
exec 1>&2

say() { printf 'setup.sh: %s\n' "$*" >&2; }
fail() { printf 'setup.sh: ERROR: %s\n' "$*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || fail "$1 not found on PATH ($2)"; }

# ---------------------------------------------------------------- Python
python_ok() {
    [ -x "$HERE/.venv/bin/python" ] || return 1
    "$HERE/.venv/bin/python" - "$HERE/requirements.txt" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, want = line.split("==")
    if version(name) != want:
        sys.exit(1)
import redis, redis_lock  # noqa: F401  (importable, not just listed)
EOF
}

setup_python() {
    if python_ok; then
        say "python: .venv already has $(tr '\n' ' ' < requirements.txt)- skipped"
        return
    fi
    local py="${PYTHON:-}"
    if [ -z "$py" ]; then
        if command -v python3.11 >/dev/null 2>&1; then py=python3.11; else py=python3; fi
    fi
    need "$py" "needed for the Python peers"
    if [ ! -x "$HERE/.venv/bin/python" ]; then
        say "python: creating venv benches/peers/.venv with $py"
        "$py" -m venv "$HERE/.venv" || fail "could not create the venv with $py"
    fi
    say "python: installing $(tr '\n' ' ' < requirements.txt)from PyPI"
    if ! "$HERE/.venv/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements.txt; then
        fail "pip could not install requirements.txt: is PyPI reachable?"
    fi
    python_ok || fail "python: installed packages do not match requirements.txt"
    say "python: done"
}

# ---------------------------------------------------------------- Node
node_ok() {
    [ -d "$HERE/node_modules" ] || return 1
    node - <<'EOF' 2>/dev/null
const fs = require("fs");
const lock = JSON.parse(fs.readFileSync("package-lock.json", "utf8"));
for (const [p, meta] of Object.entries(lock.packages)) {
  if (!p.startsWith("node_modules/")) continue;
  const got = JSON.parse(fs.readFileSync(p + "/package.json", "utf8")).version;
  if (String(got).replace(/^v/, "") !== String(meta.version).replace(/^v/, "")) process.exit(1);
}
EOF
}

setup_node() {
    need node "needed for the redlock peer"
    need npm "needed for the redlock peer"
    if node_ok; then
        say "node: node_modules matches package-lock.json - skipped"
        return
    fi
    say "node: npm ci (redlock, ioredis as pinned in package-lock.json)"
    if ! npm ci --no-audit --no-fund --loglevel=error; then
        fail "npm ci failed: is the npm registry reachable?"
    fi
    node_ok || fail "node: node_modules does not match package-lock.json after npm ci"
    say "node: done"
}

# ---------------------------------------------------------------- Rust
setup_rust() {
    need cargo "needed for the rslock peer"
    local bin="$HERE/rust/target/release/rslock-peer"
    local stale=0
    if [ -x "$bin" ]; then
        for f in "$HERE/rust/Cargo.toml" "$HERE/rust/Cargo.lock" "$HERE/rust/build.rs" "$HERE"/rust/src/*.rs; do
            [ "$f" -nt "$bin" ] && stale=1
        done
        if [ "$stale" = 0 ]; then
            say "rust: rust/target/release/rslock-peer is up to date - skipped"
            return
        fi
    fi
    say "rust: cargo build --release --locked (rslock, from crates.io on first build)"
    if ! cargo build --release --locked --manifest-path "$HERE/rust/Cargo.toml" --target-dir "$HERE/rust/target"; then
        fail "cargo build of benches/peers/rust failed: is crates.io reachable? (see the cargo output above)"
    fi
    [ -x "$bin" ] || fail "rust: $bin missing after the build"
    touch "$bin"
    say "rust: done"
}

setup_python
setup_node
setup_rust
say "all peers ready"
