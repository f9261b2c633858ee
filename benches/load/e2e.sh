#!/usr/bin/env bash
# End-to-end load run (README, "Performance: the load tool and the latest
# figures"): the relay between ankusa-load's posting connections and
# ankusa-load's own receiver (the HTTP sink's destination), next to plain
# hyper (benches/src/bin/plain-hyper.rs) in the same run.
#
#   benches/load/e2e.sh                          # every cell, 20 s each
#   DURATION=60 CELLS="baseline unordered" RATE=2000 benches/load/e2e.sh   # a soak at 2000 hooks/s
#   CELLS="unordered unordered-jq unordered-nolog" benches/load/e2e.sh   # a transform's, the attempt log's cost
#
# Cells (CELLS, in this order by default):
#   baseline     plain-hyper, the same posting, at CONNS and 256 connections
#   unordered    source `unordered` (HTTP sink, unordered), CONNS connections,
#                KEYS keys, BODY_BYTES bodies, DURATION s (RATE: open loop)
#   ordered      source `ordered` (HTTP sink ordered on x-entity-id), the same
#   onekey-20ms  source `ordered`, one key, the receiver answering after 20 ms,
#                ONE_KEY_SLOW_HOOKS hooks posted as fast as CONNS connections go
#   onekey       source `ordered`, one key, the receiver answering at once,
#                ONE_KEY_HOOKS hooks
# Not run unless named in CELLS (what a feature costs, beside the plain cell):
#   unordered-jq, ordered-jq        the cell with an identity transform,
#                `transform: {jq: '.'}`, on the sinks (the body delivered is
#                jaq's compact output of the body received: the same bytes)
#   unordered-nolog, ordered-nolog  the cell with `node.attempt_log.enabled:
#                false` (the defaults keep the attempt log)
# Each relay cell gets a fresh relay and store (RocksDB, or STORE=fjall) in a
# temp dir under /var/tmp: one tenant with large bounds, sources without
# verification or dedupe; ankusa-load waits until every acked hook has arrived
# (at most DRAIN_TIMEOUT s) and the relay's backlog is 0. Everything listens on
# 127.0.0.1, on ports found free at each start; everything this script starts
# is stopped when it ends (also on error or Ctrl-C) and the temp dir removed
# (KEEP=1 keeps it: configs, relay logs, each cell's JSON line).
#
# Knobs (environment): DURATION (20, seconds), CONNS (64), CELLS (the first
# five), STORE (rocksdb | fjall), RATE (empty: closed loop; hooks/s for
# baseline, unordered, ordered and their -jq and -nolog cells), KEYS (1000),
# BODY_BYTES (2048), ONE_KEY_HOOKS (3000), ONE_KEY_SLOW_HOOKS (500),
# DRAIN_TIMEOUT (120), BIN_DIR, RUST_LOG (info), KEEP, FAULT (receiver |
# relay-kill: below), SINK_CONCURRENCY (empty: the relay's default
# `dispatch.sink_concurrency`, 8; else written to the config).
#
# Binaries: $BIN_DIR/ankusa, $BIN_DIR/plain-hyper and $BIN_DIR/ankusa-load, built with
#   . .ci/env.sh && CARGO_TARGET_DIR=/var/cache/ankusa/bench-target \
#     nice cargo build --release -p ankusa -p ankusa-benches --bins
# Exit: 0 when every relay cell lost nothing and delivered nothing out of
# order, 1 otherwise (the table is printed either way), 2 on a setup error.
set -euo pipefail

BIN_DIR=${BIN_DIR:-/var/cache/ankusa/bench-target/release}
DURATION=${DURATION:-20}
DURATION=${DURATION%s}
CONNS=${CONNS:-64}
CELLS=${CELLS:-"baseline unordered ordered onekey-20ms onekey"}
STORE=${STORE:-rocksdb}
RATE=${RATE:-}
KEYS=${KEYS:-1000}
BODY_BYTES=${BODY_BYTES:-2048}
ONE_KEY_HOOKS=${ONE_KEY_HOOKS:-3000}
ONE_KEY_SLOW_HOOKS=${ONE_KEY_SLOW_HOOKS:-500}
DRAIN_TIMEOUT=${DRAIN_TIMEOUT:-120}
SINK_CONCURRENCY=${SINK_CONCURRENCY:-}
# A check of the counting, not a measurement: `receiver` kills ankusa-load's
# receiver for 2 s at DURATION/2; `relay-kill` SIGKILLs the relay at
# DURATION/2 and starts it again on the same store 2 s later. Either must
# show up as duplicates (and, for relay-kill, errors and maybe unexpected
# hooks), never as lost or out of order.
FAULT=${FAULT:-}
# The baseline's connection counts: CONNS (every relay cell's) and 256.
BASELINE_CONNS=$(printf '%s\n' "$CONNS" 256 | awk '!seen[$0]++' | tr '\n' ' ')

case $FAULT in ''|receiver|relay-kill) ;; *) echo "e2e.sh: FAULT is receiver or relay-kill, not $FAULT" >&2; exit 2 ;; esac
case $STORE in rocksdb|fjall) ;; *) echo "e2e.sh: STORE is rocksdb or fjall, not $STORE" >&2; exit 2 ;; esac
for cell in $CELLS; do
  case $cell in baseline|unordered|ordered|onekey-20ms|onekey|unordered-jq|ordered-jq|unordered-nolog|ordered-nolog) ;; *) echo "e2e.sh: unknown cell $cell (CELLS)" >&2; exit 2 ;; esac
done
for b in ankusa plain-hyper ankusa-load; do
  [ -x "$BIN_DIR/$b" ] || { echo "e2e.sh: $BIN_DIR/$b missing (see the build command at the top)" >&2; exit 2; }
done

WORK=$(mktemp -d /var/tmp/ankusa-e2e.XXXXXX)
PIDS=()
. "$(dirname "$0")/lib.sh"
# Drops pid $1 from PIDS (a process already waited for).
forget() {
  local keep=() p
  for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}
finish() {
  stop_all
  if [ -n "${KEEP:-}" ]; then echo "e2e.sh: kept $WORK"; else rm -rf "$WORK"; fi
}
trap finish EXIT
trap 'exit 130' INT TERM



# Writes $1/ankusa.yaml: ingest on $INGEST, admin on $ADMIN, two sources whose
# HTTP sinks deliver to ankusa-load's receiver on $SINK: `unordered`, and
# `ordered` (ordered on x-entity-id, the tool's key header). $2, a cell's
# variant: `jq` (an identity transform on both sinks) or `nolog` (the attempt
# log off); empty for neither.
write_config() {
  local transform='' nolog=''
  case ${2:-} in
    jq) transform="
        transform: {jq: '.'}" ;;
    nolog) nolog="
  attempt_log:
    enabled: false" ;;
  esac
  cat > "$1/ankusa.yaml" <<YAML
node:
  name: e2e
  data_dir: $1/data
  store: $STORE
  max_pending: 100000000
  max_pending_bytes: 1000000000000$nolog
${SINK_CONCURRENCY:+dispatch:
  sink_concurrency: $SINK_CONCURRENCY
}listeners:
  ingest: 127.0.0.1:$INGEST
  admin: 127.0.0.1:$ADMIN
tenants:
  - name: load
    max_pending: 10000000
    max_pending_bytes: 100000000000
sources:
  - name: unordered
    path: /hooks/unordered
    tenant: load
    sinks:
      - type: http
        url: http://127.0.0.1:$SINK/unordered$transform
  - name: ordered
    path: /hooks/ordered
    tenant: load
    sinks:
      - type: http
        url: http://127.0.0.1:$SINK/ordered
        ordered: true
        ordering_key:
          header: x-entity-id$transform
YAML
}

# A field of a JSON line (flat keys; numbers, null, true/false or strings).
jget() {
  sed -n "s/.*\"$2\":\(\"[^\"]*\"\|[^,}]*\).*/\1/p" "$1" | tr -d '"'
}

# a / b with 3 significant digits, or - when either is missing.
ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || a == "null" || b == "null" || b + 0 == 0) print "-"; else printf "%.3g", a / b }'
}

# A number rounded to $2 decimals, or -.
num() {
  awk -v a="$1" -v d="${2:-0}" 'BEGIN { if (a == "" || a == "null") print "-"; else printf "%.*f", d, a }'
}

TOOL_COMMON=(--body-bytes "$BODY_BYTES" --json --drain-timeout-s "$DRAIN_TIMEOUT")
RATE_ARGS=()
[ -n "$RATE" ] && RATE_ARGS=(--rate "$RATE")

# Runs the baseline at $1 connections; its JSON line goes to $WORK/baseline-$1.json.
run_baseline() {
  local c=$1 port pid
  port=$(free_port)
  "$BIN_DIR/plain-hyper" "127.0.0.1:$port" 2>>"$WORK/plain-hyper.log" &
  pid=$!
  PIDS+=("$pid")
  wait_port "$port" "$pid" || { tail -n 20 "$WORK/plain-hyper.log" >&2; exit 2; }
  echo "== baseline, $c connections" >&2
  "$BIN_DIR/ankusa-load" --baseline --label "baseline-$c" --target "http://127.0.0.1:$port/hooks/load" \
    --connections "$c" --duration-s "$DURATION" --keys "$KEYS" "${RATE_ARGS[@]}" "${TOOL_COMMON[@]}" --quiet \
    >"$WORK/baseline-$c.json" || true
  stop_all
}

# Starts the relay of cell dir $1 (its log appended to $1/relay.log); its pid
# in RELAY.
start_relay() {
  RUST_LOG=${RUST_LOG:-info} "$BIN_DIR/ankusa" serve --config "$1/ankusa.yaml" >>"$1/relay.log" 2>&1 &
  RELAY=$!
  PIDS+=("$RELAY")
  wait_port "$INGEST" "$RELAY" || { tail -n 20 "$1/relay.log" >&2; exit 2; }
  wait_port "$ADMIN" "$RELAY" || { tail -n 20 "$1/relay.log" >&2; exit 2; }
}

# Runs relay cell $1 with a fresh relay; its JSON line goes to $WORK/$1.json
# and its exit code to $WORK/$1.rc.
run_cell() {
  local cell=$1 dir="$WORK/$1" relay rc=0 path=/hooks/ordered kind=$1 variant=''
  local args=()
  # unordered-jq: the unordered cell's load, variant jq of the config (write_config).
  case $kind in *-jq|*-nolog) variant=${kind##*-}; kind=${kind%-*} ;; esac
  case $kind in
    unordered) path=/hooks/unordered; args=(--keys "$KEYS" --duration-s "$DURATION" "${RATE_ARGS[@]}") ;;
    ordered) args=(--keys "$KEYS" --duration-s "$DURATION" "${RATE_ARGS[@]}") ;;
    onekey-20ms) args=(--keys 1 --sink-delay-ms 20 --hooks "$ONE_KEY_SLOW_HOOKS") ;;
    onekey) args=(--keys 1 --hooks "$ONE_KEY_HOOKS") ;;
    *) echo "e2e.sh: unknown cell $cell" >&2; exit 2 ;;
  esac
  local half=$(( (DURATION + 1) / 2 ))
  [ "$FAULT" = receiver ] && args+=(--sink-outage-at-s "$half" --sink-outage-s 2)
  mkdir -p "$dir"
  INGEST=$(free_port); ADMIN=$(free_port); SINK=$(free_port)
  write_config "$dir" "$variant"
  "$BIN_DIR/ankusa" check-config "$dir/ankusa.yaml" >/dev/null
  start_relay "$dir"
  relay=$RELAY
  echo "== $cell, $CONNS connections, relay pid $relay" >&2
  "$BIN_DIR/ankusa-load" --label "$cell" --target "http://127.0.0.1:$INGEST$path" --admin "http://127.0.0.1:$ADMIN" \
    --sink-port "$SINK" --connections "$CONNS" "${args[@]}" "${TOOL_COMMON[@]}" >"$dir.json" &
  local tool=$!
  # Stopped with the rest on Ctrl-C (a background job of a script ignores SIGINT).
  PIDS+=("$tool")
  if [ "$FAULT" = relay-kill ]; then
    sleep "$half"
  fi
  if [ "$FAULT" = relay-kill ] && ! kill -0 "$tool" 2>/dev/null; then
    echo "== FAULT: not done, $cell ended before ${half} s" >&2
  elif [ "$FAULT" = relay-kill ]; then
    echo "== FAULT: SIGKILL of relay $relay" >&2
    kill -9 "$relay" 2>/dev/null || true
    wait "$relay" 2>/dev/null || true
    sleep 2
    start_relay "$dir"
    echo "== FAULT: relay started again, pid $RELAY" >&2
  fi
  wait "$tool" || rc=$?
  forget "$tool"
  echo "$rc" > "$dir.rc"
  stop_all
  [ -n "${KEEP:-}" ] || rm -rf "$dir/data"
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
# The disk's sync write cost, which bounds the relay's group commit.
echo "fsync probe: $(dd if=/dev/zero of="$WORK/probe" bs=4k count=500 oflag=dsync 2>&1 | tail -n 1)"
rm -f "$WORK/probe"
RAN=()
for cell in $CELLS; do
  if [ "$cell" = baseline ]; then
    for c in $BASELINE_CONNS; do run_baseline "$c"; done
  else
    run_cell "$cell"
  fi
  RAN+=("$cell")
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

# The table: absolute figures, and ratios to plain hyper at the same
# connection count (throughput: relay / plain; latency: relay / plain, how
# many times slower). Delivered/s is divided by plain hyper's acked/s.
echo
echo "store: $STORE, body: $BODY_BYTES bytes, keys: $KEYS, duration: $DURATION s, rate: ${RATE:-closed loop}${FAULT:+, fault: $FAULT}"
echo
echo "| cell | conns | acked/s | x plain | ack p50 ms | ack p99 ms | ack p99.9 ms | p99 x plain | delivered/s in window | delivered/s overall | x plain | e2e p50 ms | e2e p99 ms | e2e p99.9 ms | lost | dup | out of order (unknown) | unexpected | non-2xx / errors | backlog start / mid / end of posting / end | slope /s | ok |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|"
failed=0
for cell in "${RAN[@]}"; do
  if [ "$cell" = baseline ]; then
    for c in $BASELINE_CONNS; do
      f="$WORK/baseline-$c.json"
      [ -s "$f" ] || { echo "| plain-hyper | $c | (no result) |"; continue; }
      echo "| plain-hyper | $c | $(num "$(jget "$f" acked_per_s)") | 1 | $(num "$(jget "$f" ack_p50_ms)" 2) | $(num "$(jget "$f" ack_p99_ms)" 2) | $(num "$(jget "$f" ack_p999_ms)" 2) | 1 | - | - | - | - | - | - | - | - | - | - | $(jget "$f" non2xx) / $(jget "$f" errors) | - | - | $(jget "$f" ok) |"
    done
    continue
  fi
  f="$WORK/$cell.json"
  rc=$(cat "$WORK/$cell.rc" 2>/dev/null || echo "?")
  [ "$rc" = 0 ] || failed=1
  [ -s "$f" ] || { echo "| $cell | $CONNS | (no result, exit $rc) |"; continue; }
  b="$WORK/baseline-$CONNS.json"
  [ -s "$b" ] || b=/dev/null
  echo "| $cell | $CONNS | $(num "$(jget "$f" acked_per_s)") | $(ratio "$(jget "$f" acked_per_s)" "$(jget "$b" acked_per_s)") \
| $(num "$(jget "$f" ack_p50_ms)" 2) | $(num "$(jget "$f" ack_p99_ms)" 2) | $(num "$(jget "$f" ack_p999_ms)" 2) | $(ratio "$(jget "$f" ack_p99_ms)" "$(jget "$b" ack_p99_ms)") \
| $(num "$(jget "$f" delivered_per_s_post)") | $(num "$(jget "$f" delivered_per_s)") | $(ratio "$(jget "$f" delivered_per_s)" "$(jget "$b" acked_per_s)") \
| $(num "$(jget "$f" e2e_p50_ms)" 2) | $(num "$(jget "$f" e2e_p99_ms)" 2) | $(num "$(jget "$f" e2e_p999_ms)" 2) \
| $(jget "$f" lost) | $(jget "$f" duplicated) | $(jget "$f" out_of_order) ($(jget "$f" order_unknown)) | $(jget "$f" unexpected) | $(jget "$f" non2xx) / $(jget "$f" errors) \
| $(num "$(jget "$f" backlog_start)") / $(num "$(jget "$f" backlog_mid)") / $(num "$(jget "$f" backlog_post_end)") / $(num "$(jget "$f" backlog_end)") | $(num "$(jget "$f" backlog_slope_per_s)" 1) | $(jget "$f" ok) |"
done
echo
echo "JSON lines:"
for cell in "${RAN[@]}"; do
  if [ "$cell" = baseline ]; then
    for c in $BASELINE_CONNS; do cat "$WORK/baseline-$c.json" 2>/dev/null || true; done
  else
    cat "$WORK/$cell.json" 2>/dev/null || true
  fi
done
exit "$failed"
