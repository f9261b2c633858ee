#!/usr/bin/env bash
# The long fuzz run of the edge (README, "Fuzzing the edge"): cargo-fuzz
# (nightly, libFuzzer) over the targets of `ankusa_edge::fuzz`, the same
# functions the bounded run of `cargo test` calls, seeded from the real
# provider payloads of fixtures/corpus.
#
#   bash fuzz/run.sh list                       # the targets
#   bash fuzz/run.sh TARGET [SECONDS]           # one target, default 300 s
#   bash fuzz/run.sh all [SECONDS]              # every target in turn, SECONDS each
#   bash fuzz/run.sh replay TARGET FILE...      # run saved cases once (a crash, a case of cargo test)
#
# New inputs go to fuzz/corpus/TARGET (kept between runs), crashes to
# fuzz/artifacts/TARGET. Seeds are written to fuzz/seeds once, by an
# ignored test of the edge (stable toolchain, your usual target dir).
# The fuzz build has its own target dir (nightly and sanitizer flags would
# otherwise rebuild your test build): ANKUSA_FUZZ_TARGET_DIR, default
# /var/cache/ankusa/fuzz-target. Extra libFuzzer options: FUZZ_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/env.sh

targets=$(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^ankusa-fuzz$')
fuzz_dir="${ANKUSA_FUZZ_TARGET_DIR:-/var/cache/ankusa/fuzz-target}"

usage() {
  sed -n '7,11p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

seeds() {
  if [ -z "$(ls -A fuzz/seeds 2>/dev/null)" ]; then
    echo "+ cargo test -p ankusa-edge --test it -- --ignored --exact fuzz::fuzz_write_seeds" >&2
    cargo test -q -p ankusa-edge --test it -- --ignored --exact fuzz::fuzz_write_seeds >&2
  fi
}

fuzz() {
  CARGO_TARGET_DIR="$fuzz_dir" cargo +nightly fuzz "$@"
}

# What the fuzz build needs, checked before anything runs.
needs() {
  if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "run.sh: no nightly toolchain: rustup toolchain install nightly (libFuzzer's instrumentation needs it)" >&2
    exit 2
  fi
  if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "run.sh: cargo-fuzz is not installed: cargo install cargo-fuzz" >&2
    exit 2
  fi
}

# One target for $2 seconds; prints "TARGET: N executions in S s".
run_one() {
  local target="$1" seconds="$2" log rc=0
  mkdir -p "fuzz/corpus/$target"
  log=$(mktemp)
  echo "+ cargo +nightly fuzz run -a $target fuzz/corpus/$target fuzz/seeds -- -max_total_time=$seconds -max_len=131072 -timeout=10 -dict=fuzz/dict.txt ${FUZZ_ARGS:-}" >&2
  fuzz run -a "$target" "fuzz/corpus/$target" fuzz/seeds -- \
    -max_total_time="$seconds" -max_len=131072 -timeout=10 -dict=fuzz/dict.txt -print_final_stats=1 ${FUZZ_ARGS:-} >"$log" 2>&1 || rc=$?
  tail -n 25 "$log" | grep -E 'Done [0-9]+ runs|stat::number_of_executed_units|stat::peak_rss_mb|ERROR|panicked|Test unit written' >&2 || true
  local runs secs
  runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)
  secs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\2/p' "$log" | tail -n 1)
  if [ "$rc" -ne 0 ]; then
    echo "$target: FAILED (exit $rc); log: $log" >&2
    return "$rc"
  fi
  echo "$target: ${runs:-?} executions in ${secs:-?} s, corpus $(ls "fuzz/corpus/$target" | wc -l) inputs"
  rm -f "$log"
}

cmd="${1:-}"
case "$cmd" in
  list) printf '%s\n' $targets ;;
  replay)
    [ $# -ge 3 ] || usage
    target="$2"; shift 2
    needs
    echo "+ cargo +nightly fuzz run -a $target $*" >&2
    fuzz run -a "$target" "$@"
    ;;
  all)
    seconds="${2:-300}"
    needs
    seeds
    fuzz build -a
    failed=0
    for t in $targets; do
      run_one "$t" "$seconds" || failed=1
    done
    exit "$failed"
    ;;
  ''|-*) usage ;;
  *)
    printf '%s\n' $targets | grep -qx "$cmd" || { echo "run.sh: no target $cmd (bash fuzz/run.sh list)" >&2; exit 2; }
    needs
    seeds
    run_one "$cmd" "${2:-300}"
    ;;
esac
