#!/usr/bin/env bash
# Ingest load run: acked hooks/s and p50/p99 ack latency of the relay
# (release build, RocksDB on disk, file sink), next to a plain hyper server
# answering 200 (benches/src/bin/plain-hyper.rs), in the same run, with wrk.
#
#   benches/load/run.sh            # 15 s per cell, 16/64/256 connections
#   DURATION=5s CONNS="16" benches/load/run.sh
#
# Targets, each at every connection count (2 wrk threads, 2 KiB POST bodies,
# --latency, 10 s wrk timeout):
#   plain-hyper      the baseline: reads the body, answers 200
#   relay-unordered  one tenant, one source (no verification), a file sink
#   relay-ingest     the same, the file sink `paused: true`: acknowledged
#                    ingest alone (every hook stays pending; nothing delivers)
#   relay-ordered    the same, the file sink ordered on x-entity-id, which
#                    wrk's Lua script sets to one of 1000 keys per request
# The relay gets a fresh data_dir (RocksDB) per cell so no cell starts with
# another's backlog. Everything listens on 127.0.0.1 only, on ports found free
# at each start (the host is shared: a fixed port may already be someone
# else's server); everything this script starts is killed when it ends (also
# on error or Ctrl-C), and its temp dir under /var/tmp is removed.
#
# Knobs (environment): DURATION (15s), CONNS ("16 64 256"), THREADS (2),
# TARGETS (all three), STORE (rocksdb; memory only as a diagnostic), BIN_DIR,
# RUST_LOG (info), KEEP_LOG=FILE (keep wrk's full output).
#
# Binaries: $BIN_DIR/ankusa and $BIN_DIR/plain-hyper, built with
#   . .ci/env.sh && CARGO_TARGET_DIR=/var/cache/ankusa/bench-target \
#     nice cargo build --release -p ankusa -p ankusa-benches --bins
set -euo pipefail

BIN_DIR=${BIN_DIR:-/var/cache/ankusa/bench-target/release}
DURATION=${DURATION:-15s}
CONNS=${CONNS:-"16 64 256"}
THREADS=${THREADS:-2}
# The relay's store; rocksdb is the measurement, memory (no fsync, nothing
# durable) only a diagnostic of how much of the cost is the disk.
STORE=${STORE:-rocksdb}
TARGETS=${TARGETS:-"plain-hyper relay-unordered relay-ordered"}

command -v wrk >/dev/null || { echo "run.sh: wrk not found (apt-get install -y wrk)" >&2; exit 2; }
for b in ankusa plain-hyper; do
  [ -x "$BIN_DIR/$b" ] || { echo "run.sh: $BIN_DIR/$b missing (see the build command at the top)" >&2; exit 2; }
done

WORK=$(mktemp -d /var/tmp/ankusa-load.XXXXXX)
PIDS=()
. "$(dirname "$0")/lib.sh"
trap 'stop_all; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

# wrk's script: a 2 KiB JSON body, an ordering key header over 1000 keys, and
# a machine-readable summary line at the end. The same script drives every
# target, so the per-request Lua cost is the same for all of them.
cat > "$WORK/hook.lua" <<'LUA'
local pad = string.rep("x", 2048 - 48)
local body = '{"type":"load.test","id":"0000000000","data":"' .. pad .. '"}'
body = body .. string.rep(" ", 2048 - #body)
assert(#body == 2048)
local n = 0
local thread_seed = 0
function setup(thread)
  thread_seed = thread_seed + 1
  thread:set("seed", thread_seed)
end
function init(args)
  n = (seed or 1) * 7919
end
function request()
  n = n + 1
  return wrk.format("POST", nil, {
    ["Content-Type"] = "application/json",
    ["x-entity-id"] = "entity-" .. (n % 1000),
  }, body)
end
function done(summary, latency, requests)
  local secs = summary.duration / 1e6
  local errs = summary.errors
  local sock = errs.connect + errs.read + errs.write + errs.timeout
  local acked = summary.requests - errs.status
  io.write(string.format(
    "RESULT requests=%d acked=%d non2xx=%d sockerr=%d secs=%.2f acked_per_s=%.0f p50_ms=%.2f p99_ms=%.2f max_ms=%.2f\n",
    summary.requests, acked, errs.status, sock, secs, acked / secs,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
LUA

# A 127.0.0.1 port nothing listens on (other people's servers share the host:
# never assume a fixed port is ours).
free_addr() {
  local p
  for p in $(shuf -i 20000-45000 -n 100); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "127.0.0.1:$p"; return 0; fi
  done
  echo "run.sh: no free port found" >&2
  return 1
}

# Waits until $1 (host:port) accepts connections, at most 30 s, and checks
# that process $2 (the one we started to listen there) is still alive, so a
# server that failed to bind is an error, not a measurement of someone else's.
wait_port() {
  local host=${1%:*} port=${1##*:} pid=$2
  for _ in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || { echo "run.sh: process $pid (for $1) exited" >&2; return 1; }
    if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
      sleep 0.2
      kill -0 "$pid" 2>/dev/null || { echo "run.sh: process $pid (for $1) exited" >&2; return 1; }
      if command -v ss >/dev/null && ! ss -ltnpH "sport = :$port" | grep -q "pid=$pid,"; then
        echo "run.sh: $1 is not served by process $pid" >&2
        return 1
      fi
      return 0
    fi
    sleep 0.1
  done
  echo "run.sh: nothing listening on $1 after 30 s" >&2
  return 1
}

# Writes the relay's config for a cell into $1/ankusa.yaml; $2 = ordered (true/false).
write_config() {
  local dir=$1 ordered=$2 paused=${3:-false}
  local sink="      - type: file
        path: $dir/deliveries.ndjson
        paused: $paused"
  if [ "$ordered" = true ]; then
    sink="$sink
        ordered: true
        ordering_key:
          header: x-entity-id"
  fi
  cat > "$dir/ankusa.yaml" <<YAML
node:
  name: load
  data_dir: $dir/data
  store: $STORE
  max_pending: 100000000
  max_pending_bytes: 1000000000000
listeners:
  ingest: $INGEST
  admin: $ADMIN
tenants:
  - name: load
    max_pending: 10000000
    max_pending_bytes: 100000000000
sources:
  - name: load
    path: /hooks/load
    tenant: load
    sinks:
$sink
YAML
}

# The relay's counters of interest from /metrics (one line), with the
# Writer's wall time over the run: groups committed, hooks per group, the mean
# time from a group's write to the end of the sync that answers it
# (`ankusa_writer_commit_seconds`), and that time summed over the run's
# seconds (`writer_busy`: above 1 means groups overlap in the pipelined sync;
# well under 1 means the Writer waits for requests, so ingest is bound before
# it, at the edge).
metrics() {
  { exec 3<>"/dev/tcp/${ADMIN%:*}/${ADMIN##*:}" &&
    printf 'GET /metrics HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$ADMIN" >&3 &&
    timeout 5 cat <&3; } 2>/dev/null |
    awk -v secs="${DURATION%s}" '/^ankusa_ingest_accepted(_total)? /{a=$2} /^ankusa_dispatch_delivered(_total)? /{d=$2}
         /^ankusa_queue_pending /{p=$2}
         /^ankusa_dispatch_lanes /{l=$2}
         /^ankusa_writer_group_hooks_sum /{gh=$2} /^ankusa_writer_group_hooks_count /{g=$2}
         /^ankusa_writer_commit_seconds_sum /{cs=$2}
         END{printf "accepted=%s delivered=%s pending=%s lanes=%s", a, d, p, l
             if (g > 0) printf " groups=%d hooks_per_group=%.1f commit_ms=%.2f writer_busy=%.2f", g, gh / g, 1000 * cs / g, cs / secs}'
}

# Runs wrk against $1 (URL) with $2 connections; prints wrk's output to the
# log and the RESULT line to stdout.
run_wrk() {
  local url=$1 conns=$2 log=$3
  echo "+ wrk -t$THREADS -c$conns -d$DURATION --timeout 10s --latency -s hook.lua $url" >>"$log"
  timeout 120 wrk -t"$THREADS" -c"$conns" -d"$DURATION" --timeout 10s --latency -s "$WORK/hook.lua" "$url" >>"$log" 2>&1 || true
  grep '^RESULT' "$log" | tail -n 1
}

LOG="$WORK/wrk.log"
: > "$LOG"
ROWS=()
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
# The disk's sync write cost, which bounds the relay's group commit: 500
# sequential 4 KiB O_DSYNC writes in the directory the relay's store uses.
echo "fsync probe: $(dd if=/dev/zero of="$WORK/probe" bs=4k count=500 oflag=dsync 2>&1 | tail -n 1)"
rm -f "$WORK/probe"
for target in $TARGETS; do
  for c in $CONNS; do
    case $target in
      plain-hyper)
        PLAIN=$(free_addr)
        "$BIN_DIR/plain-hyper" "$PLAIN" 2>>"$WORK/plain-hyper.log" &
        pid=$!
        PIDS+=("$pid")
        wait_port "$PLAIN" "$pid" || { tail -n 20 "$WORK/plain-hyper.log" >&2; exit 1; }
        res=$(run_wrk "http://$PLAIN/hooks/load" "$c" "$LOG")
        extra=""
        ;;
      relay-unordered|relay-ordered|relay-ingest)
        cell="$WORK/$target-$c"
        mkdir -p "$cell"
        INGEST=$(free_addr)
        ADMIN=$(free_addr)
        ordered=false
        [ "$target" = relay-ordered ] && ordered=true
        paused=false
        [ "$target" = relay-ingest ] && paused=true
        write_config "$cell" "$ordered" "$paused"
        "$BIN_DIR/ankusa" check-config "$cell/ankusa.yaml" >/dev/null
        RUST_LOG=${RUST_LOG:-info} "$BIN_DIR/ankusa" serve --config "$cell/ankusa.yaml" 2>>"$WORK/relay.log" >&2 &
        pid=$!
        PIDS+=("$pid")
        wait_port "$INGEST" "$pid" || { tail -n 20 "$WORK/relay.log" >&2; exit 1; }
        wait_port "$ADMIN" "$pid"
        res=$(run_wrk "http://$INGEST/hooks/load" "$c" "$LOG")
        extra=$(metrics)
        ;;
      *) echo "run.sh: unknown target $target" >&2; exit 2 ;;
    esac
    stop_all
    [ "${target#relay}" != "$target" ] && rm -rf "$cell"
    echo "$target c=$c $res ${extra}"
    ROWS+=("$target|$c|$res|$extra")
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

echo
echo "| target | conns | acked hooks/s | p50 ms | p99 ms | max ms | non-2xx | socket errors | relay counters at end of run |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---|"
for row in "${ROWS[@]}"; do
  IFS='|' read -r target c res extra <<<"$row"
  get() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$res"; }
  echo "| $target | $c | $(get acked_per_s) | $(get p50_ms) | $(get p99_ms) | $(get max_ms) | $(get non2xx) | $(get sockerr) | ${extra:--} |"
done
if [ -n "${KEEP_LOG:-}" ]; then cp "$LOG" "$KEEP_LOG"; echo "wrk output copied to $KEEP_LOG"; fi
