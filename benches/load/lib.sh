# Shared by the load scripts (run.sh, e2e.sh, sinks.sh): the processes a script
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
# fixed port is ours).
free_port() {
  local p
  for p in $(shuf -i 20000-45000 -n 100); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  echo "$(basename "$0"): no free port found" >&2
  return 1
}
