#!/usr/bin/env bash
# Runs the loom model (ADR 0004 4.5-4.6) the one way it is meant to run, and
# fails unless loom tests ran and explored interleavings (a cfg typo would
# otherwise pass with zero tests). For CI: `bash model-tests/loom/run.sh`.
#
# Its own target dir: `--cfg ankusa_loom` in RUSTFLAGS rebuilds the whole graph
# (engine, keys, lanes, queue, loom; no RocksDB), and must never touch the
# shared test target dir. Release mode, at most 2 preemptions.
set -euo pipefail
cd "$(dirname "$0")/../.."
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
export RUSTFLAGS="--cfg ankusa_loom"
export CARGO_TARGET_DIR="${ANKUSA_LOOM_TARGET_DIR:-/var/cache/ankusa/loom-target}"
unset CC CXX
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
"${CARGO:-cargo}" test --release -p ankusa-loom-model -- --nocapture --test-threads=2 2>&1 | tee "$log" | grep -E '^loom |^test |test result' || true
passed=$(grep -E '^test result: ok\. [0-9]+ passed' "$log" | awk '{s += $4} END {print s + 0}')
failed=$(grep -cE '^test result: FAILED' "$log" || true)
explored=$(grep -E '^loom .*interleavings explored' "$log" | awk '{for (i = 1; i <= NF; i++) if ($i == "interleavings") s += $(i - 1)} END {print s + 0}')
echo "loom: ${passed} tests passed, ${explored} interleavings explored, $(( $(date +%s) - start ))s (LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS})"
if [ "$failed" -ne 0 ] || [ "$passed" -eq 0 ] || [ "$explored" -eq 0 ]; then
  echo "loom: FAILED (failed runs: ${failed}, tests passed: ${passed}, interleavings: ${explored})" >&2
  exit 1
fi
