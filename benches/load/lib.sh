# Shared by the load scripts (run.sh, e2e.sh, sinks.sh, cluster.sh): the processes a script
# started, stopped at its end, and free loopback ports. Source it after
# setting PIDS=().

# SIGTERM to every process in PIDS (the relay drains), SIGKILL whatever is
# left after 20 s; empties PIDS.
stop_all() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 1 200); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  PIDS=()
}

# A 127.0.0.1 port nothing listens on (the host is shared: never assume a
# fixed port is ours), below the kernel's ephemeral range: a port in that
# range can be taken between this check and the bind by the local end of
# an outgoing connection (the load tool's, the relay's sink client's), and
# the relay then fails to start with "Address already in use".
free_port() {
  local p lo
  lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  [ "$lo" -gt 11000 ] 2>/dev/null || lo=32768
  for p in $(shuf -i "10000-$((lo - 1))" -n 100); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  echo "$(basename "$0"): no free port found" >&2
  return 1
}

# Waits until 127.0.0.1:$1 accepts connections, at most 30 s, served by
# process $2 (a server that failed to bind is an error, not a measurement of
# someone else's).
wait_port() {
  local port=$1 pid=$2 me=${0##*/}
  for _ in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || { echo "$me: process $pid (for port $port) exited" >&2; return 1; }
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      if command -v ss >/dev/null && ! ss -ltnpH "sport = :$port" | grep -q "pid=$pid,"; then
        echo "$me: port $port is not served by process $pid" >&2
        return 1
      fi
      return 0
    fi
    sleep 0.1
  done
  echo "$me: nothing listening on port $port after 30 s" >&2
  return 1
}
