#!/usr/bin/env bash
# Delivered hooks/s per broker and cloud sink: for each sink kind, a fresh
# release relay (RocksDB under /var/tmp) with two sources,
#   load  unordered, the sink of the kind
#   lane  the same sink, ordered on the x-entity-id header
# then `sink-load` (benches/src/bin/sink-load.rs) posts HOOKS hooks to `load`
# (32 at once, each its own key), HOOKS hooks over KEYS keys to `lane` (KEYS
# lanes, each in order; KEYS=0 skips it) and ORDERED hooks with one key to
# `lane` (one lane: one delivery at a time), and reads /metrics until all are
# delivered.
# The peer's own count is printed beside (messages it holds after the run).
#
#   benches/load/sinks.sh                       # every kind below
#   SINKS="redis nats" HOOKS=2000 benches/load/sinks.sh
#   SINKS="redis nats kafka" HOOKS=200000 KEYS=1000 SINK_CONCURRENCY=64 CONC=64 benches/load/sinks.sh
#
# SINK_CONCURRENCY (empty: the relay's default `dispatch.sink_concurrency`)
# is written to the config; KAFKA_LINGER_MS (empty: librdkafka's 5 ms) sets
# the Kafka sink's `linger.ms`.
#
# Peers: the machine's Redis 6379, RabbitMQ 5672 and NATS 4222, moto 5000
# (.ci/moto.sh), plain-hyper for `http`, a Python Pub/Sub REST peer
# (peers.py) for `pubsub`. Kafka has no broker here: its sink is given
# librdkafka's own mock cluster inside the relay process
# (`test.mock.num.brokers: 3`, topics auto-created), the peer its tests use;
# the peer count is not read for it.
#
# Binaries: $BIN_DIR/{ankusa,plain-hyper,sink-load}, built with
#   . .ci/env.sh && CARGO_TARGET_DIR=/var/cache/ankusa/bench-target \
#     nice cargo build --release -p ankusa -p ankusa-benches --bins
set -euo pipefail
cd "$(dirname "$0")"

BIN_DIR=${BIN_DIR:-/var/cache/ankusa/bench-target/release}
SINKS=${SINKS:-"http file redis rabbitmq nats sqs pubsub kafka"}
HOOKS=${HOOKS:-10000}
ORDERED=${ORDERED:-2000}
CONC=${CONC:-32}
KEYS=${KEYS:-1000}
SINK_CONCURRENCY=${SINK_CONCURRENCY:-}
VENV=${VENV:-/var/cache/ankusa/moto-venv}
PY="$VENV/bin/python"

for b in ankusa plain-hyper sink-load; do
  [ -x "$BIN_DIR/$b" ] || { echo "sinks.sh: $BIN_DIR/$b missing (see the build command at the top)" >&2; exit 2; }
done
[ -x "$PY" ] || { echo "sinks.sh: $PY missing: run .ci/moto.sh first" >&2; exit 2; }
"$PY" -c 'import pika, nats, boto3' 2>/dev/null || "$VENV/bin/pip" install -q pika nats-py >/dev/null

WORK=$(mktemp -d /var/tmp/ankusa-sinks.XXXXXX)
PIDS=()
. ./lib.sh
trap 'stop_all; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

wait_port() {
  for _ in $(seq 1 300); do
    kill -0 "$2" 2>/dev/null || { echo "sinks.sh: process $2 exited" >&2; return 1; }
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# The sink entry (YAML flow mapping, without ordered/ordering_key) of a kind;
# the `{source}` placeholders keep the two sources' messages apart.
sink_yaml() {
  case $1 in
    http) echo "{type: http, url: 'http://127.0.0.1:$PLAIN_PORT/hooks'}" ;;
    file) echo "{type: file, path: '$DIR/deliveries-{source}.ndjson'}" ;;
    redis) echo "{type: redis, url: 'redis://127.0.0.1:6379', stream: 'ankusa-load:{source}'}" ;;
    rabbitmq) echo "{type: rabbitmq, url: 'amqp://guest:guest@127.0.0.1:5672/%2f', exchange: '', routing_key: 'ankusa-load-{source}'}" ;;
    nats) echo "{type: nats, url: 'nats://127.0.0.1:4222', subject: 'ankusa.load.{source}'}" ;;
    sqs) echo "{type: sqs, queue_url: 'http://127.0.0.1:5000/123456789012/ankusa-load-{source}', endpoint_url: 'http://127.0.0.1:5000', region: us-east-1}" ;;
    pubsub) echo "{type: pubsub, project: ankusa-load, topic: '{source}', emulator_host: '127.0.0.1:$PUBSUB_PORT'}" ;;
    kafka) echo "{type: kafka, brokers: '127.0.0.1:9', topic: 'ankusa-load-{source}', properties: {test.mock.num.brokers: '3', allow.auto.create.topics: 'true'${KAFKA_LINGER_MS:+, linger.ms: '$KAFKA_LINGER_MS'}}}" ;;
  esac
}

peer_count() {
  case $1 in
    rabbitmq|nats|sqs) "$PY" peers.py count "$1" ;;
    redis) echo $(( $(redis-cli XLEN ankusa-load:load) + $(redis-cli XLEN ankusa-load:lane) )) ;;
    file) cat "$DIR"/deliveries-*.ndjson | wc -l ;;
    pubsub) "$PY" -c "import json,urllib.request;print(json.load(urllib.request.urlopen('http://127.0.0.1:$PUBSUB_PORT/count'))['count'])" ;;
    *) echo "-" ;;
  esac
}

PLAIN_PORT=$(free_port)
"$BIN_DIR/plain-hyper" "127.0.0.1:$PLAIN_PORT" 2>"$WORK/plain.log" &
PIDS+=("$!"); wait_port "$PLAIN_PORT" "$!"
PUBSUB_PORT=$(free_port)
"$PY" peers.py pubsub-peer "$PUBSUB_PORT" 2>"$WORK/pubsub.log" &
PIDS+=("$!"); wait_port "$PUBSUB_PORT" "$!"

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); commit $(git rev-parse --short HEAD)"
for kind in $SINKS; do
  DIR="$WORK/$kind"; mkdir -p "$DIR"
  case $kind in
    rabbitmq|nats|sqs) "$PY" peers.py setup "$kind" ;;
    redis) redis-cli DEL ankusa-load:load ankusa-load:lane >/dev/null ;;
  esac
  sink=$(sink_yaml "$kind")
  lane_sink="${sink%\}}, ordered: true, ordering_key: {header: x-entity-id}}"
  if [ "$kind" = sqs ]; then lane_sink=${lane_sink/ankusa-load-\{source\}/ankusa-load-lane.fifo}; sink=${sink/\{source\}/load}; fi
  INGEST=$(free_port); ADMIN=$(free_port)
  cat > "$DIR/ankusa.yaml" <<YAML
node: {data_dir: '$DIR/data', store: rocksdb, max_pending: 100000000, max_pending_bytes: 1000000000000}
listeners: {ingest: '127.0.0.1:$INGEST', admin: '127.0.0.1:$ADMIN'}
tenants: [{name: load, max_pending: 10000000, max_pending_bytes: 100000000000}]
${SINK_CONCURRENCY:+dispatch:
  sink_concurrency: $SINK_CONCURRENCY}
sources:
  - {name: load, tenant: load, sinks: [$sink]}
  - {name: lane, tenant: load, sinks: [$lane_sink]}
YAML
  AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 RUST_LOG=warn \
    "$BIN_DIR/ankusa" serve --config "$DIR/ankusa.yaml" >"$DIR/relay.log" 2>&1 &
  relay=$!; PIDS+=("$relay")
  wait_port "$ADMIN" "$relay" || { tail -20 "$DIR/relay.log" >&2; exit 1; }
  wait_port "$INGEST" "$relay"
  unordered=$("$BIN_DIR/sink-load" --ingest "127.0.0.1:$INGEST" --admin "127.0.0.1:$ADMIN" --source load --hooks "$HOOKS" --concurrency "$CONC")
  keyed='{}'; expected=$((HOOKS + ORDERED))
  if [ "$KEYS" -gt 0 ]; then
    keyed=$("$BIN_DIR/sink-load" --ingest "127.0.0.1:$INGEST" --admin "127.0.0.1:$ADMIN" --source lane --hooks "$HOOKS" --concurrency "$CONC" --keys "$KEYS")
    expected=$((expected + HOOKS))
  fi
  ordered=$("$BIN_DIR/sink-load" --ingest "127.0.0.1:$INGEST" --admin "127.0.0.1:$ADMIN" --source lane --hooks "$ORDERED" --concurrency "$CONC" --key one-lane)
  echo "$kind unordered $unordered"
  [ "$KEYS" -gt 0 ] && echo "$kind $KEYS-keys $keyed"
  echo "$kind one-lane  $ordered"
  echo "$kind peer holds $(peer_count "$kind") messages (expected $expected)"
  kill "$relay"; wait "$relay" 2>/dev/null || true
  case $kind in rabbitmq|nats|sqs) "$PY" peers.py teardown "$kind" ;; redis) redis-cli DEL ankusa-load:load ankusa-load:lane >/dev/null ;; esac
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
