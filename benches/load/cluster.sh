#!/usr/bin/env bash
# What cluster mode (README, "Running a cluster") costs a hook: ankusa-load
# against one standalone relay, and against a 2-node cluster posting to the
# tenant's owner and to the other node (which forwards each hook to the
# owner over HTTP), in one run with the same load settings for every cell.
#
#   benches/load/cluster.sh                      # every cell, 20 s each
#   DURATION=60 RATE=2000 benches/load/cluster.sh   # the same at 2000 hooks/s (open loop)
#
# Cells (CELLS, in this order by default):
#   standalone         one relay without a `cluster:` section (e2e.sh's
#                      `unordered` cell): source `unordered`
#   cluster-local      a 2-node cluster (n1, n2) over one etcd member; the
#                      load posted to the node that owns the tenant
#   cluster-forwarded  the same cluster (the same processes and stores, after
#                      cluster-local); the load posted to the node that does
#                      NOT own the tenant, which forwards every hook to the owner
# Every cell: one tenant `load` with large bounds, one source with one
# unordered HTTP sink to ankusa-load's receiver, no verification or dedupe,
# CONNS connections, KEYS keys, BODY_BYTES bodies, DURATION s (RATE: open
# loop); ankusa-load waits until every acked hook has arrived (at most
# DRAIN_TIMEOUT s) and the owner's backlog is 0 (its --admin is the owner's,
# where the hooks are committed). The cluster's nodes share the tenant and
# two sources, `local` and `forwarded` (one per cluster cell, each with its own
# receiver port); cluster: {node_id: n1|n2, etcd: [the member], lease_ttl_ms:
# 3000}. The owner is read with `ankusa cluster status --json` before each
# cluster cell and again after it (a change is reported under the table), and
# the entry node's `ankusa_cluster_forwarded_total` before and after says how
# many hooks it forwarded (cluster-local: 0; cluster-forwarded: every one).
#
# Everything listens on 127.0.0.1, on ports found free at each start; etcd
# (one member, its --data-dir in the temp dir) is started by this script.
# Everything this script starts is stopped when it ends (also on error or
# Ctrl-C: the relays first, then etcd) and the temp dir under /var/tmp
# removed (KEEP=1 keeps it: configs, relay and etcd logs, each cell's JSON
# line, the cluster status before and after each cluster cell).
#
# Knobs (environment): DURATION (20, seconds), CONNS (64), CELLS (all three),
# STORE (rocksdb | fjall), RATE (empty: closed loop; else hooks/s), KEYS
# (1000), BODY_BYTES (2048), DRAIN_TIMEOUT (120), SINK_CONCURRENCY (empty: the
# relay's default), BIN_DIR, ETCD (the etcd binary; default `etcd` on PATH,
# waited for up to WAIT_ETCD_S s, 300, when missing), RUST_LOG (info), KEEP.
# (No knob is named ETCD_*: etcd reads and warns about those.)
#
# Binaries: $BIN_DIR/ankusa and $BIN_DIR/ankusa-load, built with
#   . .ci/env.sh && CARGO_TARGET_DIR=/var/cache/ankusa/bench-target \
#     nice cargo build --release -p ankusa -p ankusa-benches --bins
# and Debian's etcd 3.4 (apt-get install -y etcd-server); jq and curl.
# Exit: 0 when every cell ran and lost nothing (ankusa-load's exit 0), 1
# otherwise (the table is printed either way), 2 on a setup error.
set -euo pipefail

BIN_DIR=${BIN_DIR:-/var/cache/ankusa/bench-target/release}
DURATION=${DURATION:-20}
DURATION=${DURATION%s}
CONNS=${CONNS:-64}
CELLS=${CELLS:-"standalone cluster-local cluster-forwarded"}
STORE=${STORE:-rocksdb}
RATE=${RATE:-}
KEYS=${KEYS:-1000}
BODY_BYTES=${BODY_BYTES:-2048}
DRAIN_TIMEOUT=${DRAIN_TIMEOUT:-120}
SINK_CONCURRENCY=${SINK_CONCURRENCY:-}
WAIT_ETCD_S=${WAIT_ETCD_S:-300}
LEASE_TTL_MS=3000
TENANT=load

case $STORE in rocksdb|fjall) ;; *) echo "cluster.sh: STORE is rocksdb or fjall, not $STORE" >&2; exit 2 ;; esac
NEED_CLUSTER=
for cell in $CELLS; do
  case $cell in
    standalone) ;;
    cluster-local|cluster-forwarded) NEED_CLUSTER=1 ;;
    *) echo "cluster.sh: unknown cell $cell (CELLS)" >&2; exit 2 ;;
  esac
done
for b in ankusa ankusa-load; do
  [ -x "$BIN_DIR/$b" ] || { echo "cluster.sh: $BIN_DIR/$b missing (see the build command at the top)" >&2; exit 2; }
done
for t in jq curl; do
  command -v "$t" >/dev/null || { echo "cluster.sh: $t not found (apt-get install -y $t)" >&2; exit 2; }
done
if [ -n "$NEED_CLUSTER" ]; then
  # etcd may be being installed by another job: wait for it a while.
  if [ -z "${ETCD:-}" ] && ! command -v etcd >/dev/null; then
    echo "cluster.sh: waiting up to ${WAIT_ETCD_S} s for etcd (apt-get install -y etcd-server)" >&2
    for _ in $(seq 1 "$WAIT_ETCD_S"); do command -v etcd >/dev/null && break; sleep 1; done
  fi
  ETCD=${ETCD:-$(command -v etcd || true)}
  if [ -z "$ETCD" ] || [ ! -x "$ETCD" ]; then
    echo "cluster.sh: no etcd (apt-get install -y etcd-server, or set ETCD)" >&2
    exit 2
  fi
fi

WORK=$(mktemp -d /var/tmp/ankusa-cluster.XXXXXX)
PIDS=()
ETCD_PID=
. "$(dirname "$0")/lib.sh"
# Drops pid $1 from PIDS (a process already waited for).
forget() {
  local keep=() p
  for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}
# shellcheck disable=SC2317  # run by the EXIT trap
# The relays (and the tool) first: a relay stopping cleanly releases its
# tenants and revokes its lease in etcd. Then etcd.
finish() {
  stop_all
  if [ -n "$ETCD_PID" ]; then
    kill "$ETCD_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$ETCD_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$ETCD_PID" 2>/dev/null || true
    wait "$ETCD_PID" 2>/dev/null || true
    ETCD_PID=
  fi
  if [ -n "${KEEP:-}" ]; then echo "cluster.sh: kept $WORK"; else rm -rf "$WORK"; fi
}
trap finish EXIT
trap 'exit 130' INT TERM


# write_config FILE NAME INGEST ADMIN CLUSTER_BLOCK SOURCES: a relay's config.
# Everything after `listeners` is the same text on every node of the cluster
# (the catalog compares each shared part as written), but cluster.node_id.
# SOURCES: "name:sink_port" pairs, each a source /hooks/<name> of tenant
# `load` with one unordered HTTP sink to ankusa-load's receiver on sink_port.
write_config() {
  local file=$1 name=$2 ingest=$3 admin=$4 cluster=$5 sources=$6 s data
  data="$(dirname "$file")/$name-data"
  {
    cat <<YAML
node:
  name: $name
  data_dir: $data
  store: $STORE
  max_pending: 100000000
  max_pending_bytes: 1000000000000
listeners:
  ingest: 127.0.0.1:$ingest
  admin: 127.0.0.1:$admin
${cluster}${SINK_CONCURRENCY:+dispatch:
  sink_concurrency: $SINK_CONCURRENCY
}tenants:
  - name: $TENANT
    max_pending: 10000000
    max_pending_bytes: 100000000000
sources:
YAML
    for s in $sources; do
      cat <<YAML
  - name: ${s%%:*}
    path: /hooks/${s%%:*}
    tenant: $TENANT
    sinks:
      - type: http
        url: http://127.0.0.1:${s##*:}/unordered
YAML
    done
  } >"$file"
  "$BIN_DIR/ankusa" check-config "$file" >"$file.check" 2>&1 ||
    { cat "$file.check" >&2; echo "cluster.sh: $file does not load" >&2; exit 2; }
  rm -f "$file.check"
}

# start_relay FILE LOG INGEST ADMIN: starts `ankusa serve` on FILE; its pid in RELAY.
start_relay() {
  RUST_LOG=${RUST_LOG:-info} "$BIN_DIR/ankusa" serve --config "$1" >>"$2" 2>&1 &
  RELAY=$!
  PIDS+=("$RELAY")
  wait_port "$3" "$RELAY" || { tail -n 20 "$2" >&2; exit 2; }
  wait_port "$4" "$RELAY" || { tail -n 20 "$2" >&2; exit 2; }
}

# wait_ready ADMIN PID LOG: /readyz answers 200 (a cluster node: it has
# joined), at most 90 s.
wait_ready() {
  local deadline=$((SECONDS + 90))
  while [ "$SECONDS" -lt "$deadline" ]; do
    kill -0 "$2" 2>/dev/null || { tail -n 20 "$3" >&2; echo "cluster.sh: relay $2 exited" >&2; exit 2; }
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$1/readyz" 2>/dev/null)" = 200 ] && return 0
    sleep 0.2
  done
  tail -n 20 "$3" >&2
  echo "cluster.sh: relay $2 not ready (/readyz) after 90 s" >&2
  exit 2
}

# A field of a JSON line ("null" when missing or not a JSON file).
jget() {
  jq -r --arg k "$2" '.[$k] | tostring' "$1" 2>/dev/null || echo null
}

# a / b with 3 significant digits, or - when either is missing.
ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || a == "null" || b == "null" || b + 0 == 0) print "-"; else printf "%.3g", a / b }'
}

# A number rounded to $2 decimals, or -.
num() {
  awk -v a="$1" -v d="${2:-0}" 'BEGIN { if (a == "" || a == "null") print "-"; else printf "%.*f", d, a }'
}

# The value of counter $2 (summed over its label sets) on admin port $1, or
# empty when /metrics does not answer.
metric() {
  local text
  text=$(curl -sf --max-time 5 "http://127.0.0.1:$1/metrics" 2>/dev/null) || return 0
  awk -v m="$2" '$1 == m || index($1, m "{") == 1 { s += $NF; n++ } END { printf "%.0f", s + 0 }' <<<"$text"
}

TOOL_COMMON=(--connections "$CONNS" --keys "$KEYS" --duration-s "$DURATION" --body-bytes "$BODY_BYTES"
  --json --drain-timeout-s "$DRAIN_TIMEOUT")
[ -n "$RATE" ] && TOOL_COMMON+=(--rate "$RATE")

# run_tool CELL TARGET ADMIN SINK: ankusa-load; its JSON line goes to
# $WORK/CELL.json and its exit code to $WORK/CELL.rc.
run_tool() {
  local cell=$1 rc=0
  "$BIN_DIR/ankusa-load" --label "$cell" --target "$2" --admin "$3" --sink-port "$4" \
    "${TOOL_COMMON[@]}" >"$WORK/$cell.json" &
  local tool=$!
  # Stopped with the rest on Ctrl-C (a background job of a script ignores SIGINT).
  PIDS+=("$tool")
  wait "$tool" || rc=$?
  forget "$tool"
  echo "$rc" >"$WORK/$cell.rc"
}

run_standalone() {
  local dir="$WORK/standalone" ingest admin sink
  mkdir -p "$dir"
  ingest=$(free_port); admin=$(free_port); sink=$(free_port)
  write_config "$dir/ankusa.yaml" standalone "$ingest" "$admin" "" "unordered:$sink"
  start_relay "$dir/ankusa.yaml" "$dir/relay.log" "$ingest" "$admin"
  local relay=$RELAY
  echo "== standalone, $CONNS connections, relay pid $relay" >&2
  run_tool standalone "http://127.0.0.1:$ingest/hooks/unordered" "http://127.0.0.1:$admin" "$sink"
  # Only this relay: the cluster's nodes, when CELLS ran a cluster cell
  # first, keep running (idle) for the cells after.
  forget "$relay"
  local others=("${PIDS[@]}")
  PIDS=("$relay")
  stop_all
  PIDS=("${others[@]}")
  [ -n "${KEEP:-}" ] || rm -rf "$dir/standalone-data"
}

# ---- the cluster: etcd, n1, n2 -------------------------------------------------
declare -A INGEST_OF ADMIN_OF
SINK_LOCAL=
SINK_FORWARDED=
start_cluster() {
  local dir="$WORK/cluster" client peer n cluster_block
  mkdir -p "$dir"
  client=$(free_port)
  peer=$(free_port)
  while [ "$peer" = "$client" ]; do peer=$(free_port); done
  "$ETCD" --name e1 --data-dir "$dir/etcd" --logger zap \
    --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "e1=http://127.0.0.1:$peer" --initial-cluster-token "ankusa-bench-$$" \
    --initial-cluster-state new >>"$dir/etcd.log" 2>&1 &
  ETCD_PID=$!
  wait_port "$client" "$ETCD_PID" || { tail -n 20 "$dir/etcd.log" >&2; exit 2; }
  # A write goes through once the member has elected itself leader (key
  # /ankusa-bench/ready, value 1: the JSON gateway takes base64).
  local ok=
  for _ in $(seq 1 150); do
    if curl -sf --max-time 2 -X POST "http://127.0.0.1:$client/v3/kv/put" \
      -d '{"key":"L2Fua3VzYS1iZW5jaC9yZWFkeQ==","value":"MQ=="}' 2>/dev/null | grep -q '"header"'; then
      ok=1; break
    fi
    sleep 0.2
  done
  [ -n "$ok" ] || { tail -n 20 "$dir/etcd.log" >&2; echo "cluster.sh: etcd takes no writes after 30 s" >&2; exit 2; }
  echo "== etcd $("$ETCD" --version | sed -n 's/^etcd Version: //p'), pid $ETCD_PID, client 127.0.0.1:$client" >&2

  SINK_LOCAL=$(free_port)
  SINK_FORWARDED=$(free_port)
  for n in n1 n2; do
    INGEST_OF[$n]=$(free_port)
    ADMIN_OF[$n]=$(free_port)
    cluster_block="cluster:
  node_id: $n
  etcd: [http://127.0.0.1:$client]
  lease_ttl_ms: $LEASE_TTL_MS
"
    write_config "$dir/$n.yaml" "$n" "${INGEST_OF[$n]}" "${ADMIN_OF[$n]}" "$cluster_block" \
      "local:$SINK_LOCAL forwarded:$SINK_FORWARDED"
  done
  # One after the other: n1 joins, then n2 (the owner is whichever the
  # controller chose: read before each cell).
  for n in n1 n2; do
    start_relay "$dir/$n.yaml" "$dir/$n.log" "${INGEST_OF[$n]}" "${ADMIN_OF[$n]}"
    wait_ready "${ADMIN_OF[$n]}" "$RELAY" "$dir/$n.log"
    echo "== relay $n, pid $RELAY: ingest 127.0.0.1:${INGEST_OF[$n]}, admin 127.0.0.1:${ADMIN_OF[$n]}" >&2
  done
}

# owner FILE: the live owner of the tenant once both nodes are alive, from
# `ankusa cluster status --json` (saved to FILE); empty when not yet.
owner() {
  "$BIN_DIR/ankusa" cluster status --json --config "$WORK/cluster/n1.yaml" >"$1" 2>"$1.err" || return 0
  jq -r --arg t "$TENANT" '
    (.nodes | map(select(.alive == true) | .id)) as $live
    | select(($live | index("n1")) != null and ($live | index("n2")) != null)
    | .tenants[] | select(.name == $t) | .owner
    | select(. != null) | . as $o | select(($live | index($o)) != null)' "$1" 2>/dev/null | head -n 1
}

# wait_owner FILE: the owner in OWNER (at most 60 s; not printed: a command
# substitution would hold off the TERM trap until it ended).
wait_owner() {
  local o='' deadline=$((SECONDS + 60))
  while [ "$SECONDS" -lt "$deadline" ]; do
    o=$(owner "$1")
    [ -n "$o" ] && break
    sleep 0.5
  done
  [ -n "$o" ] || { cat "$1" "$1.err" >&2 2>/dev/null; echo "cluster.sh: tenant $TENANT has no live owner after 60 s" >&2; exit 2; }
  case $o in n1|n2) ;; *) echo "cluster.sh: tenant $TENANT owned by $o, not n1 or n2" >&2; exit 2 ;; esac
  OWNER=$o
}

# run_cluster_cell CELL: the load to the owner (cluster-local) or the other node.
run_cluster_cell() {
  local cell=$1 own entry source sink addr fwd0 fwd1 after
  wait_owner "$WORK/$cell.status-before.json"
  own=$OWNER
  addr=$(jq -r --arg o "$own" '.nodes[] | select(.id == $o) | .address' "$WORK/$cell.status-before.json")
  if [ "$cell" = cluster-local ]; then
    entry=$own; source=local; sink=$SINK_LOCAL
  else
    if [ "$own" = n1 ]; then entry=n2; else entry=n1; fi
    source=forwarded; sink=$SINK_FORWARDED
  fi
  echo "== $cell, $CONNS connections: tenant $TENANT owned by $own ($addr), posting to $entry" >&2
  fwd0=$(metric "${ADMIN_OF[$entry]}" ankusa_cluster_forwarded_total)
  run_tool "$cell" "http://127.0.0.1:${INGEST_OF[$entry]}/hooks/$source" "http://127.0.0.1:${ADMIN_OF[$own]}" "$sink"
  fwd1=$(metric "${ADMIN_OF[$entry]}" ankusa_cluster_forwarded_total)
  after=$(owner "$WORK/$cell.status-after.json")
  echo "$entry $own ${after:-?} $(if [ -n "$fwd0" ] && [ -n "$fwd1" ]; then echo $((fwd1 - fwd0)); else echo -; fi)" >"$WORK/$cell.route"
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
# The disk's sync write cost, which bounds the relay's group commit.
echo "fsync probe: $(dd if=/dev/zero of="$WORK/probe" bs=4k count=500 oflag=dsync 2>&1 | tail -n 1)"
rm -f "$WORK/probe"
RAN=()
for cell in $CELLS; do
  case $cell in
    standalone) run_standalone ;;
    *)
      if [ -z "$ETCD_PID" ]; then start_cluster; fi
      run_cluster_cell "$cell"
      ;;
  esac
  RAN+=("$cell")
done
stop_all
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

# The table: absolute figures, and ratios of each cluster cell to standalone
# (throughput: cluster / standalone; latency: cluster / standalone, how many
# times slower).
echo
echo "store: $STORE, body: $BODY_BYTES bytes, keys: $KEYS, connections: $CONNS, duration: $DURATION s, rate: ${RATE:-closed loop}, unordered HTTP sink"
echo
echo "| cell | posted to -> owner | acked/s | x standalone | ack p50 ms | x standalone | ack p99 ms | x standalone | e2e p99 ms | delivered | lost | dup | non-2xx / errors | forwarded by entry node | ok |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
failed=0
notes=()
s="$WORK/standalone.json"
[ -s "$s" ] || s=/dev/null
for cell in "${RAN[@]}"; do
  f="$WORK/$cell.json"
  rc=$(cat "$WORK/$cell.rc" 2>/dev/null || echo "?")
  [ "$rc" = 0 ] || failed=1
  route="-"; fwd="-"
  if [ -s "$WORK/$cell.route" ]; then
    read -r entry own after fwd <"$WORK/$cell.route"
    route="$entry -> $own"
    [ "$after" = "$own" ] || notes+=("$cell: the tenant's owner was $own before the cell and ${after} after it: the cell mixes local and forwarded hooks")
    case $cell:$fwd in
      cluster-local:0|cluster-forwarded:-|cluster-local:-) ;;
      cluster-local:*) notes+=("$cell: the entry node forwarded $fwd hooks (expected 0)") ;;
      cluster-forwarded:*) [ "$fwd" -gt 0 ] 2>/dev/null || notes+=("$cell: the entry node forwarded nothing") ;;
    esac
  fi
  [ -s "$f" ] || { echo "| $cell | $route | (no result, exit $rc) |"; failed=1; continue; }
  [ "$(jget "$f" lost)" = 0 ] || failed=1
  if [ "$cell" = standalone ]; then
    xa=1; x50=1; x99=1
  else
    xa=$(ratio "$(jget "$f" acked_per_s)" "$(jget "$s" acked_per_s)")
    x50=$(ratio "$(jget "$f" ack_p50_ms)" "$(jget "$s" ack_p50_ms)")
    x99=$(ratio "$(jget "$f" ack_p99_ms)" "$(jget "$s" ack_p99_ms)")
  fi
  echo "| $cell | $route | $(num "$(jget "$f" acked_per_s)") | $xa \
| $(num "$(jget "$f" ack_p50_ms)" 2) | $x50 | $(num "$(jget "$f" ack_p99_ms)" 2) | $x99 | $(num "$(jget "$f" e2e_p99_ms)" 2) \
| $(jget "$f" delivered) | $(jget "$f" lost) | $(jget "$f" duplicated) | $(jget "$f" non2xx) / $(jget "$f" errors) | $fwd | $(jget "$f" ok) |"
done
if [ "${#notes[@]}" -gt 0 ]; then
  echo
  for n in "${notes[@]}"; do echo "note: $n"; done
fi
echo
echo "JSON lines:"
for cell in "${RAN[@]}"; do cat "$WORK/$cell.json" 2>/dev/null || true; done
exit "$failed"
