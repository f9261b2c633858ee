#!/usr/bin/env bash
# Stops the demo cluster of deploy/cluster/up.sh: HAProxy first (no new
# hooks), then the relays (SIGTERM: they finish their commits and deliveries
# in flight; SIGKILL for any still running after 20 s), then etcd (last: a
# stopping relay still talks to it).
#
#   deploy/cluster/down.sh           # stop; the state dir stays (up.sh starts on it again)
#   deploy/cluster/down.sh --clean   # stop, and delete the state dir
#
# The state dir is $ANKUSA_CLUSTER_DIR, default ./ankusa-cluster, as for up.sh.
# Only the processes named by its pid files are signalled.
set -euo pipefail

clean=0
case "${1:-}" in
  "") ;;
  --clean) clean=1 ;;
  -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) printf 'usage: %s [--clean]\n' "$0" >&2; exit 2 ;;
esac

say() { printf '[cluster] %s\n' "$*"; }
die() { printf '[cluster] error: %s\n' "$*" >&2; exit 1; }

state=${ANKUSA_CLUSTER_DIR:-./ankusa-cluster}
[ -d "$state" ] || { say "no state dir $state: nothing to stop"; exit 0; }
state=$(cd "$state" && pwd)
[ -e "$state/.ankusa-cluster" ] || die "$state is not a state dir of up.sh (no .ankusa-cluster in it)"

# pid_of NAME COMM: the pid in $state/NAME.pid if it is a live process named
# COMM (a pid since reused by another program is left alone, and so is a
# zombie).
pid_of() {
  local pid st comm
  pid=$(cat "$state/$1.pid" 2>/dev/null) && [ -n "$pid" ] || return 1
  read -r st comm < <(ps -o stat=,comm= -p "$pid" 2>/dev/null) || return 1
  [ "${st#Z}" = "$st" ] && [ "$comm" = "$2" ] && echo "$pid"
}

# gone PID...: none of them is running any more.
gone() {
  local pid st
  for pid in "$@"; do
    st=$(ps -o stat= -p "$pid" 2>/dev/null) || continue
    case $st in Z*) ;; *) return 1 ;; esac
  done
}
# relay_comm NAME: the process name up.sh recorded for relay NAME (the
# binary's file name: ANKUSA_BIN may name one that is not called `ankusa`).
relay_comm() { cat "$state/$1.comm" 2>/dev/null || echo ankusa; }
# stop SECONDS COMM NAME...: SIGTERM to each (COMM `@relay`: the name up.sh
# recorded for each relay), wait up to SECONDS for all of
# them, SIGKILL to those left (and wait until the kernel has them gone).
stop() {
  local secs=$1 comm=$2; shift 2
  local name pid pids=() names=()
  for name in "$@"; do
    if pid=$(pid_of "$name" "${comm/#@relay/$(relay_comm "$name")}"); then
      say "stopping $name (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid"); names+=("$name")
    fi
  done
  if [ "${#pids[@]}" -gt 0 ]; then
    local deadline=$((SECONDS + secs)) i
    until gone "${pids[@]}" || [ "$SECONDS" -ge "$deadline" ]; do sleep 0.2; done
    for i in "${!pids[@]}"; do
      if ! gone "${pids[$i]}"; then
        say "${names[$i]} (pid ${pids[$i]}) still running after ${secs}s: SIGKILL"
        kill -KILL "${pids[$i]}" 2>/dev/null || true
      fi
    done
    deadline=$((SECONDS + 5))
    until gone "${pids[@]}" || [ "$SECONDS" -ge "$deadline" ]; do sleep 0.2; done
    gone "${pids[@]}" || die "still running after SIGKILL: ${pids[*]}"
  fi
  for name in "$@"; do rm -f "$state/$name.pid" "$state/$name.comm"; done
}

stop 10 haproxy haproxy
stop 20 @relay n1 n2 n3
stop 20 etcd etcd1 etcd2 etcd3
say "stopped"

if [ "$clean" -eq 1 ]; then
  rm -rf -- "$state"
  say "deleted $state"
fi
