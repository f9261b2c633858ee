#!/usr/bin/env bash
# The test peers the test command needs, on loopback: Redis 6379, RabbitMQ 5672
# (guest/guest), NATS with JetStream 4222, and moto's SQS server 5000
# (.ci/moto.sh). Each is checked first and only installed (Debian package) and
# started when it does not answer. Kafka's tests run librdkafka's mock cluster
# in-process and Pub/Sub's a local REST peer: nothing to start for them.
#
# Run by .ci/run and by the README's test command; idempotent. Needs root (or
# sudo) only when something must be installed or started.
set -euo pipefail
cd "$(dirname "$0")/.."

started=$(date +%s)
say() { printf '[peers %4ds] %s\n' "$(( $(date +%s) - started ))" "$*"; }
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=sudo; fi

# The broker sinks' integration tests run against real servers on loopback and
# fail, not skip, without them: Redis 6379, RabbitMQ 5672 (guest/guest), NATS
# with JetStream 4222, and moto's SQS server 5000 (.ci/moto.sh).
port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
wait_for() { # what, seconds, command...
  local what=$1 secs=$2; shift 2
  for _ in $(seq 1 $((secs * 5))); do "$@" && { say "$what is up"; return 0; }; sleep 0.2; done
  say "$what did not come up within ${secs}s"; return 1
}
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  say "installing $*"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

redis_up() { timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/6379 && printf "PING\r\n" >&3 && head -c 5 <&3' 2>/dev/null | grep -q PONG; }
if ! redis_up; then
  command -v redis-server >/dev/null 2>&1 || apt_install redis-server
  say "starting redis-server on 127.0.0.1:6379"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
  wait_for "redis (127.0.0.1:6379)" 10 redis_up
else
  say "redis answers on 127.0.0.1:6379"
fi

rabbit_up() { rabbitmq-diagnostics -q check_port_connectivity >/dev/null 2>&1 && port_open 5672; }
if ! port_open 5672; then
  command -v rabbitmq-server >/dev/null 2>&1 || apt_install rabbitmq-server
  say "starting rabbitmq-server (127.0.0.1:5672)"
  # A node left stopped by `rabbitmqctl stop_app` only needs start_app.
  if rabbitmqctl -q status >/dev/null 2>&1; then
    rabbitmqctl -q start_app
  else
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 rabbitmq-server -detached
  fi
  wait_for "rabbitmq (127.0.0.1:5672)" 90 rabbit_up
else
  say "rabbitmq answers on 127.0.0.1:5672"
fi

nats_up() { timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/4222 && head -c 4 <&3' 2>/dev/null | grep -q INFO; }
if ! nats_up; then
  command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || apt_install nats-server
  nats_bin=$(command -v nats-server || echo /usr/sbin/nats-server)
  mkdir -p /var/lib/nats-server
  say "starting nats-server with JetStream on 127.0.0.1:4222"
  start-stop-daemon --start --oknodo --background --exec "$nats_bin" -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
  wait_for "nats (127.0.0.1:4222)" 20 nats_up
else
  say "nats answers on 127.0.0.1:4222"
fi

if [ -f .ci/moto.sh ]; then
  bash .ci/moto.sh
fi

