#!/usr/bin/env bash
# The SQS sink's test peer: moto's server on 127.0.0.1:5000 (sinks/tests/it/sqs.rs
# and tests/it/sqs.rs read ANKUSA_TEST_SQS_ENDPOINT, default
# http://127.0.0.1:5000, and fail without it).
#
# Idempotent: creates the venv under /var/cache/ankusa/moto-venv if it is
# missing (moto[sqs] 5.2.5 and flask/flask-cors for its server: about 40 s),
# starts moto_server in the background unless something already answers HTTP
# on 127.0.0.1:5000, then waits until it answers. Exits non-zero, loudly, if
# it does not come up.
set -euo pipefail

cache=/var/cache/ankusa
venv=$cache/moto-venv
log=$cache/moto.log
host=127.0.0.1
port=5000

say() { printf '[moto] %s\n' "$*"; }

# Any HTTP answer counts (moto answers GET / with a JSON document).
answers() {
  "${PYTHON:-python3}" - "$host" "$port" <<'PY' >/dev/null 2>&1
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(f"http://{sys.argv[1]}:{sys.argv[2]}/", timeout=2)
except urllib.error.HTTPError:
    pass
PY
}

if answers; then
  say "something answers on $host:$port already; not starting moto"
  exit 0
fi

mkdir -p "$cache"
if [ ! -x "$venv/bin/moto_server" ]; then
  say "creating $venv"
  rm -rf "$venv"
  if ! python3 -m venv "$venv" 2>/dev/null; then
    # Debian's python3 has no ensurepip without python3-venv.
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq python3-venv >/dev/null
    rm -rf "$venv"
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install -q 'moto[sqs]==5.2.5' flask flask-cors
fi

say "starting moto_server on $host:$port (log $log)"
nohup "$venv/bin/moto_server" -H "$host" -p "$port" >>"$log" 2>&1 &
pid=$!

for _ in $(seq 1 150); do
  if answers; then
    say "moto answers on $host:$port (pid $pid)"
    exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    say "ERROR: moto_server exited; last lines of $log:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
  sleep 0.2
done
say "ERROR: moto_server did not answer on $host:$port within 30 s; last lines of $log:" >&2
tail -n 20 "$log" >&2
exit 1
