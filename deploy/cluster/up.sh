#!/usr/bin/env bash
# A demo cluster on one machine, on loopback (deploy/cluster/README.md): three
# etcd members, three relays n1..n3 sharing the tenants acme, globex and
# initech, and HAProxy in front of them on 127.0.0.1:18080.
#
#   deploy/cluster/up.sh          # start whatever is not running; print how to use it
#   deploy/cluster/down.sh        # stop it all (--clean: and delete the state dir)
#
# Environment:
#   ANKUSA_CLUSTER_DIR  the state dir: etcd's data, the relays' configs, stores
#                       and logs, the deliveries files, the pid files.
#                       Default: ./ankusa-cluster (relative to the cwd).
#   ANKUSA_BIN          the relay binary. Default: `ankusa` on PATH, else the
#                       newest of $CARGO_TARGET_DIR/{release,debug}/ankusa and
#                       <repo>/target/{release,debug}/ankusa.
#
# Idempotent: a part whose pid file names a live process is left alone, so
# running it again after `kill -9` of a relay starts just that relay. Needs
# Debian's etcd-server (etcd 3.4), haproxy (2.6) and curl.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
state=${ANKUSA_CLUSTER_DIR:-./ankusa-cluster}

say() { printf '[cluster] %s\n' "$*"; }
die() { printf '[cluster] error: %s\n' "$*" >&2; exit 1; }

# ---- what it needs -----------------------------------------------------------
command -v etcd >/dev/null 2>&1 || die "etcd not found: apt-get install etcd-server"
command -v haproxy >/dev/null 2>&1 || die "haproxy not found: apt-get install haproxy"
command -v curl >/dev/null 2>&1 || die "curl not found: apt-get install curl"
command -v setsid >/dev/null 2>&1 || die "setsid not found: apt-get install util-linux"

find_bin() {
  if [ -n "${ANKUSA_BIN:-}" ]; then
    [ -x "$ANKUSA_BIN" ] || die "ANKUSA_BIN=$ANKUSA_BIN is not an executable file"
    echo "$ANKUSA_BIN"; return
  fi
  if command -v ankusa >/dev/null 2>&1; then command -v ankusa; return; fi
  # The newest build: a release build left behind by an older debug one
  # would otherwise run stale code.
  local c best=""
  for c in ${CARGO_TARGET_DIR:+"$CARGO_TARGET_DIR/release/ankusa" "$CARGO_TARGET_DIR/debug/ankusa"} \
           "$repo/target/release/ankusa" "$repo/target/debug/ankusa"; do
    if [ -x "$c" ] && { [ -z "$best" ] || [ "$c" -nt "$best" ]; }; then best=$c; fi
  done
  [ -n "$best" ] || die "no relay binary: set ANKUSA_BIN, put ankusa on PATH, or build it (. .ci/env.sh && cargo build --release)"
  echo "$best"
}
bin=$(find_bin)
case $bin in /*) ;; *) bin="$(pwd)/$bin" ;; esac

mkdir -p "$state"
state=$(cd "$state" && pwd)
# down.sh --clean deletes only a directory carrying this marker.
[ -e "$state/.ankusa-cluster" ] || [ -z "$(ls -A "$state")" ] ||
  die "$state exists and is not a state dir of up.sh (no .ankusa-cluster in it): set ANKUSA_CLUSTER_DIR to another directory"
touch "$state/.ankusa-cluster"

# ---- processes and pid files ---------------------------------------------------
# alive NAME COMM: the pid in $state/NAME.pid is a live process named COMM (a
# pid reused by another program does not count, nor a zombie: a relay just
# killed with -9 is one for a moment).
alive() {
  local pid st comm
  pid=$(cat "$state/$1.pid" 2>/dev/null) && [ -n "$pid" ] || return 1
  read -r st comm < <(ps -o stat=,comm= -p "$pid" 2>/dev/null) || return 1
  [ "${st#Z}" = "$st" ] && [ "$comm" = "$2" ]
}
# relay_comm NAME: the process name relay NAME runs under (the binary's file
# name as ps shows it, 15 characters at most), recorded when up.sh started it:
# ANKUSA_BIN may name a binary that is not called `ankusa`.
relay_comm() { cat "$state/$1.comm" 2>/dev/null || echo ankusa; }
port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
port_free() { ! port_open "$1" || die "127.0.0.1:$1 is taken by another process (ss -ltnp 'sport = :$1'); $2 needs it"; }
# spawn NAME CMD...: runs CMD in its own session (Ctrl-C or closing this
# terminal does not reach it), stdout and stderr appended to $state/NAME.log.
spawn() {
  local name=$1; shift
  (cd "$state" && exec setsid "$@" >>"$state/$name.log" 2>&1 </dev/null) &
  echo $! >"$state/$name.pid"
}
# wait_until WHAT SECONDS NAME COMM CHECK...: polls CHECK until it succeeds;
# gives up, with the tail of NAME's log, when the process dies or time is up.
wait_until() {
  local what=$1 secs=$2 name=$3 comm=$4; shift 4
  local deadline=$((SECONDS + secs))
  until "$@"; do
    if ! alive "$name" "$comm"; then
      tail -n 20 "$state/$name.log" >&2 || true
      die "$what exited (log: $state/$name.log); deploy/cluster/down.sh stops the rest"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      tail -n 20 "$state/$name.log" >&2 || true
      die "$what not ready within ${secs}s (log: $state/$name.log); deploy/cluster/down.sh stops the rest"
    fi
    sleep 0.2
  done
}
started=0

# ---- etcd: three members --------------------------------------------------------
members=(1 2 3)
client_port() { echo $(( $1 == 1 ? 2379 : $1 * 10000 + 2379 )); }  # 2379 22379 32379
peer_port() { echo $(( $(client_port "$1") + 1 )); }                # 2380 22380 32380
initial=""
for i in "${members[@]}"; do initial+="${initial:+,}e$i=http://127.0.0.1:$(peer_port "$i")"; done
endpoints=""
for i in "${members[@]}"; do endpoints+="${endpoints:+, }http://127.0.0.1:$(client_port "$i")"; done

for i in "${members[@]}"; do
  if alive "etcd$i" etcd; then continue; fi
  port_free "$(client_port "$i")" "etcd member e$i"
  port_free "$(peer_port "$i")" "etcd member e$i"
  say "starting etcd member e$i: client 127.0.0.1:$(client_port "$i"), peer 127.0.0.1:$(peer_port "$i")"
  # --initial-cluster* only matter the first time: a member restarted on its
  # data dir rejoins from what it stored there.
  spawn "etcd$i" etcd --name "e$i" --data-dir "$state/etcd$i" --logger zap \
    --listen-client-urls "http://127.0.0.1:$(client_port "$i")" \
    --advertise-client-urls "http://127.0.0.1:$(client_port "$i")" \
    --listen-peer-urls "http://127.0.0.1:$(peer_port "$i")" \
    --initial-advertise-peer-urls "http://127.0.0.1:$(peer_port "$i")" \
    --initial-cluster "$initial" --initial-cluster-token ankusa-demo \
    --initial-cluster-state new
  started=1
done
# A write goes through only once the members have elected a leader.
etcd_writable() {
  curl -sf --max-time 2 -X POST "http://127.0.0.1:$(client_port "$1")/v3/kv/put" \
    -d '{"key":"L2Fua3VzYS1kZW1vL3JlYWR5","value":"MQ=="}' 2>/dev/null | grep -q '"header"'
}  # key /ankusa-demo/ready, value 1 (the JSON gateway takes base64)
for i in "${members[@]}"; do wait_until "etcd member e$i" 30 "etcd$i" etcd etcd_writable "$i"; done
say "etcd takes writes: $endpoints"

# ---- the relays: n1..n3 from one template --------------------------------------
nodes=(1 2 3)
# The parts every node must have the same (all but node, listeners and
# cluster.node_id / advertise): written once, pasted into each file.
shared_cluster="  etcd: [$endpoints]
  lease_ttl_ms: 3000
  hold_ms: 4000"
shared_rest="tenants:
  - name: acme
  - name: globex
  - name: initech
sources:"
for t in acme globex initech; do
  shared_rest+="
  - name: $t
    path: /hooks/$t
    tenant: $t
    # A provider's resend carrying the same webhook-id is answered 200 and
    # stored once (by the node that owns the tenant when it arrives).
    dedupe: {header: webhook-id}
    sinks:
      # One NDJSON line per hook, each x-entity-id's hooks in the order
      # acknowledged (hooks without it share one lane: $t/$t).
      - type: file
        name: deliveries
        path: $state/deliveries-$t.ndjson
        ordered: true
        ordering_key: {header: x-entity-id}"
done
node_config() {
  cat <<EOF
# Node n$1 of the demo cluster, written by deploy/cluster/up.sh (it writes a
# node's file only when the file is missing: delete it to get it back). Every
# section but node, listeners and cluster.node_id is the same in n1.yaml,
# n2.yaml and n3.yaml: a node whose shared parts differ refuses to join.
node:
  name: n$1
  data_dir: $state/n$1-data
  store: rocksdb
listeners:
  ingest: 127.0.0.1:1808$1
  admin: 127.0.0.1:1908$1
cluster:
  node_id: n$1
$shared_cluster
$shared_rest
EOF
}
# ready N: relay nN's /readyz answers 200, or 503 "drained" (a node drained
# with `ankusa cluster drain` runs and serves, but tells load balancers to
# send it nothing until `ankusa cluster undrain`).
ready() {
  local out
  out=$(curl -s --max-time 2 -w '\n%{http_code}' "http://127.0.0.1:1908$1/readyz" 2>/dev/null) || return 1
  case "$out" in
    *$'\n'200 | drained*) return 0 ;;
  esac
  return 1
}

for n in "${nodes[@]}"; do
  if alive "n$n" "$(relay_comm "n$n")"; then continue; fi
  port_free "1808$n" "relay n$n (ingest)"
  port_free "1908$n" "relay n$n (admin)"
  [ -e "$state/n$n.yaml" ] || node_config "$n" >"$state/n$n.yaml"
  "$bin" check-config "$state/n$n.yaml" >"$state/n$n.check" 2>&1 ||
    { cat "$state/n$n.check" >&2; die "$state/n$n.yaml does not load"; }
  rm -f "$state/n$n.check"
  say "starting relay n$n: ingest 127.0.0.1:1808$n, admin 127.0.0.1:1908$n"
  basename "$bin" | cut -c1-15 >"$state/n$n.comm"
  spawn "n$n" "$bin" serve --config "$state/n$n.yaml"
  started=1
done
# A node whose node_id's record from an earlier run is still alive in etcd
# waits for it to expire (lease TTL + 2 s) before it joins.
for n in "${nodes[@]}"; do wait_until "relay n$n" 90 "n$n" "$(relay_comm "n$n")" ready "$n"; done
say "relays ready: $(for n in "${nodes[@]}"; do printf 'http://127.0.0.1:1908%s/readyz ' "$n"; done)"

# ---- HAProxy --------------------------------------------------------------------
if ! alive haproxy haproxy; then
  port_free 18080 haproxy
  port_free 18404 "haproxy's stats page"
  haproxy -c -q -f "$here/haproxy.cfg" || die "haproxy refuses $here/haproxy.cfg (haproxy -c -f $here/haproxy.cfg says why)"
  say "starting haproxy on 127.0.0.1:18080 (stats: http://127.0.0.1:18404/)"
  # In the foreground (-db), under spawn: its log lines go to stdout, so to
  # $state/haproxy.log, and its pid is the one recorded.
  spawn haproxy haproxy -db -f "$here/haproxy.cfg"
  started=1
fi
lb_up() { curl -s --max-time 2 -o /dev/null http://127.0.0.1:18404/ 2>/dev/null && port_open 18080; }
wait_until haproxy 10 haproxy haproxy lb_up

# ---- how to use it ----------------------------------------------------------------
if [ "$started" -eq 0 ]; then
  say "already running (every pid file in $state names a live process)"
fi
cat <<EOF

Ankusa demo cluster, state in $state
  relay binary   $bin
  etcd           $endpoints
  relays         n1 ingest 127.0.0.1:18081 admin 127.0.0.1:19081
                 n2 ingest 127.0.0.1:18082 admin 127.0.0.1:19082
                 n3 ingest 127.0.0.1:18083 admin 127.0.0.1:19083
  haproxy        http://127.0.0.1:18080 (stats: http://127.0.0.1:18404/)
  logs           $state/{etcd1,etcd2,etcd3,n1,n2,n3,haproxy}.log

Send a hook (any node takes any tenant's hooks, forwarding them to the owner):
  curl -s -X POST http://127.0.0.1:18080/hooks/acme -H 'x-entity-id: a1' -H 'content-type: application/json' -d '{"n":1}'
  wc -l $state/deliveries-*.ndjson

Who owns what:
  $bin cluster status --config $state/n1.yaml

A failover: kill a relay, keep sending through haproxy, watch its tenants move:
  kill -9 \$(cat $state/n2.pid)
  watch -n 1 $bin cluster status --config $state/n1.yaml
Bring it back (up.sh starts only what is not running):
  ANKUSA_CLUSTER_DIR=$state ANKUSA_BIN=$bin $here/up.sh

Stop (--clean also deletes $state):
  ANKUSA_CLUSTER_DIR=$state $here/down.sh
EOF
