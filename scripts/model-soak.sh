#!/usr/bin/env bash
# A long comparison of every backend with the protocol model: many more random sequences than
# the test suite draws (CI runs 20-50 per server backend), one backend after another, each
# run's output kept. A mismatch prints its seed and its shortest sequence; replay it with
# `DLOCK_DIFF_SEED=<seed>` on the same test, and add the seed to `FOUND` once fixed
# (docs/protocol-model.md).
#
#   bash scripts/model-soak.sh [SCALE] [BACKEND...]
#
# SCALE multiplies the default bounds (servers 250 sequences, about 5-10 minutes each on two
# CPUs; memory 40,000; Sentinel, Cluster and RedLock 400 each); BACKEND is any of memory,
# redis, postgresql, etcd, topologies (default: all). The servers are needed as for the test
# suite (scripts/test-all.sh installs them). Run it on a quiet machine: the sequences' leases
# are short, and a machine too busy to answer in time shows as a failed step, not a mismatch.
set -uo pipefail
cd "$(dirname "$0")/.."

scale=${1:-1}
shift || true
if ! [[ $scale =~ ^[0-9]+$ ]] || [ "$scale" -lt 1 ]; then
  echo "model-soak: SCALE must be a whole number of at least 1, not '$scale'" >&2
  exit 2
fi
backends=("$@")
if [ ${#backends[@]} -eq 0 ]; then
  backends=(memory redis postgresql etcd topologies)
fi

logs=$(mktemp -d "${TMPDIR:-/tmp}/dlock-model-soak.XXXXXX")
features=(--features postgres,etcd)
summary=()
failures=0

# soak NAME SEQUENCES TEST FILTER [ARGS...]: one comparison run, its output in $logs/NAME.log.
soak() {
  local name=$1 sequences=$2 test=$3 filter=$4 start=$SECONDS result=pass
  shift 4
  local log="$logs/$name.log"
  printf '==> %s: %s sequences (%s)\n' "$name" "$sequences" "$log"
  if ! DLOCK_DIFF_SEQUENCES=$sequences cargo test -q -p dlock-tests "${features[@]}" \
    --test "$test" -- "$filter" "$@" >"$log" 2>&1; then
    result=FAIL
    failures=$((failures + 1))
    grep -E 'answered differently|DLOCK_DIFF_SEED=' "$log" | sort -u | head -n 20
  fi
  summary+=("$(printf '%-4s  %5ss  %s' "$result" $((SECONDS - start)) "$name")")
}

for backend in "${backends[@]}"; do
  case $backend in
    memory)
      soak memory $((40000 * scale)) lease_model \
        the_in_process_backend_answers_as_the_protocol_model ;;
    redis)
      soak redis $((250 * scale)) redis_single \
        answers_as_the_protocol_model_through_a_faulty_network ;;
    postgresql)
      soak postgresql $((250 * scale)) postgresql \
        answers_as_the_protocol_model_through_a_faulty_network ;;
    etcd)
      soak etcd $((250 * scale)) etcd answers_as_the_protocol_model_through_a_faulty_network ;;
    topologies)
      soak topologies $((400 * scale)) redis_topologies differential:: --test-threads 1 ;;
    *)
      echo "model-soak: no backend '$backend' (memory, redis, postgresql, etcd, topologies)" >&2
      exit 2 ;;
  esac
done

printf '\nmodel-soak, logs in %s:\n' "$logs"
printf '  %s\n' "${summary[@]}"
[ "$failures" -eq 0 ]
