#!/usr/bin/env bash
# Every published crate packages, and its package holds every source file its build reads.
#
# `cargo package` without `--no-verify` builds each crate again from its package alone, about a
# minute and a half on two cores. What that build catches that packaging itself does not is a
# file the build reads (a module, a Lua script, the SQL, a README) left out of the package; the
# compiler's dep-info of the test build already names each file the build read, so each is
# looked for in `cargo package --list` instead.
set -uo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}

cargo package --workspace --exclude dlock-fault-suite --exclude dlock-test-support \
  --exclude dlock-tests --exclude dlock-bench --no-verify --allow-dirty --quiet || exit 1

missing=0
# package folder library-or-binary name
for entry in "dlock-core lock-core dlock_core" "dlock-memory lock-memory dlock_memory" \
  "dlock-redis lock-redis dlock_redis" "dlock-postgres lock-postgres dlock_postgres" \
  "dlock-etcd lock-etcd dlock_etcd" "dlock-cli cli dlock" "dlocks . dlocks"; do
  read -r package dir name <<<"$entry"
  listed=$(cargo package -p "$package" --list --allow-dirty 2>/dev/null) || {
    echo "cargo package -p $package --list failed"
    missing=1
    continue
  }
  deps=$(ls "$target"/debug/deps/"$name"-*.d 2>/dev/null)
  if [ -z "$deps" ]; then
    echo "$package: no dep-info of its build under $target/debug/deps (build the tests first)"
    missing=1
    continue
  fi
  # Each file the build read under the package's folder, relative to it.
  read_files=$(sed -n 's/^[^:]*: //p' $deps | tr ' ' '\n' | grep -v '^$' | sort -u |
    while read -r file; do
      case "$dir" in
        .) case "$file" in /*|lock-*/*|cli/*|tests/*|benches/*|test-support/*|protocol-model/*|fault-suite/*) ;; *) echo "$file" ;; esac ;;
        *) case "$file" in "$dir"/*) echo "${file#"$dir"/}" ;; esac ;;
      esac
    done)
  for file in $read_files; do
    if ! grep -qxF "$file" <<<"$listed"; then
      echo "$package: its build reads $file, which its package leaves out"
      missing=1
    fi
  done
done
exit "$missing"
