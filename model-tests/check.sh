#!/usr/bin/env bash
# The model checks a user runs (README, "Model checks"): the state machine
# against the invariant checker and a reference model, the backend
# equivalence, the planted-bug checks and the loom model of ADR 0004 4.5-4.6.
#
#   bash model-tests/check.sh quick                        # every model test, default sizes
#   bash model-tests/check.sh soak --cases N [--backend memory|rocksdb|fjall]
#   bash model-tests/check.sh loom [--preemptions N]       # default 2
#   bash model-tests/check.sh mutation NAME                # plant one known bug, watch it caught and shrunk
#   bash model-tests/check.sh mutation --list
#
# Each form prints the command it runs. The proptest forms run the model
# tests' test binary as `cargo test` builds it: `cargo test -p
# ankusa-model-tests` would resolve other features for the build tools
# (syn) and so rebuild librocksdb-sys (RocksDB's C++), so this builds with the
# workspace's own package set (`cargo test --test it --no-run`, a no-op after
# `cargo test`) and runs that binary. loom has its own target dir
# (model-tests/loom/run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/env.sh

usage() {
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# The model tests' `it` binary, built with the workspace's features.
model_binary() {
  local json exe
  json=$(cargo test --test it --no-run --message-format=json-render-diagnostics)
  exe=$(printf '%s\n' "$json" | grep '"reason":"compiler-artifact"' | grep 'ankusa-model-tests' \
    | grep -o '"executable":"[^"]*"' | head -n 1 | sed 's/^"executable":"//; s/"$//')
  if [ -z "$exe" ]; then
    echo "check.sh: no test binary of ankusa-model-tests was built" >&2
    exit 1
  fi
  printf '%s\n' "$exe"
}

# Runs the model binary from its package dir (proptest-regressions/ is
# relative to it), printing the command first.
run_model() {
  local exe
  exe=$(model_binary)
  echo "+ cd model-tests && $* $exe ${ARGS[*]}" >&2
  cd model-tests
  env "$@" "$exe" "${ARGS[@]}"
}

cmd="${1:-}"
[ -n "$cmd" ] || usage
shift
case "$cmd" in
  quick)
    ARGS=(--test-threads=2)
    run_model ANKUSA_MODEL_BACKEND=memory
    ;;
  soak)
    cases=10000 backend=memory
    while [ $# -gt 0 ]; do
      case "$1" in
        --cases) cases="$2"; shift 2 ;;
        --backend) backend="$2"; shift 2 ;;
        *) usage ;;
      esac
    done
    case "$backend" in memory|rocksdb|fjall) ;; *) echo "check.sh: --backend is memory, rocksdb or fjall" >&2; exit 2 ;; esac
    case "$cases" in ''|*[!0-9]*) echo "check.sh: --cases is a number" >&2; exit 2 ;; esac
    ARGS=(--exact machine::lanes_state_machine --nocapture)
    start=$(date +%s)
    run_model ANKUSA_SOAK_CASES="$cases" ANKUSA_MODEL_BACKEND="$backend"
    echo "soak: ${cases} cases on ${backend}, passed in $(( $(date +%s) - start ))s" >&2
    ;;
  loom)
    preemptions=2
    while [ $# -gt 0 ]; do
      case "$1" in
        --preemptions) preemptions="$2"; shift 2 ;;
        *) usage ;;
      esac
    done
    echo "+ LOOM_MAX_PREEMPTIONS=$preemptions bash model-tests/loom/run.sh" >&2
    LOOM_MAX_PREEMPTIONS="$preemptions" bash model-tests/loom/run.sh
    ;;
  mutation)
    name="${1:-}"
    list=$(grep -oE '^ +mutation_[a-z_]+ => [A-Za-z]+' model-tests/tests/it/mutations.rs | sed 's/^ *mutation_//; s/ => .*//')
    if [ -z "$name" ] || [ "$name" = "--list" ]; then
      echo "mutations (lanes/src/mutation.rs; promote_keeps_marker is a benign control that must stay green):"
      printf '  %s\n' $list
      [ "$name" = "--list" ] || exit 2
      exit 0
    fi
    name="${name//-/_}"
    if ! printf '%s\n' $list | grep -qx "$name"; then
      echo "check.sh: no mutation $name; bash model-tests/check.sh mutation --list" >&2
      exit 2
    fi
    ARGS=(--exact "mutations::mutation_${name}" --nocapture)
    run_model ANKUSA_MODEL_BACKEND=memory
    ;;
  *) usage ;;
esac
