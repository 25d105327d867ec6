#!/usr/bin/env bash
# Reproduces "RabbitMQ delivery against Kafka: drain" in docs/benchmarks.md: the
# same pre-filled outbox drained by outbox-relay to outbox-mock-kafka and, with
# relay.transport = rabbitmq, to the testenv's RabbitMQ node (a durable queue
# bound to the exchange); a bare publisher with confirms to the same node is the
# ceiling (issue 43's goal: the relay >= 0.7x it); the store-only floor and the
# database's ceiling in the same run.
#   bench/run_rabbitmq_drain.sh [--rows 100000] [--runs 3]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROWS=100000 RUNS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
rabbitmq_bench_setup  # sets B and machine
out="$("$B/bench/relay_bench" --relay "$B/tools/outbox_relay/outbox-relay" \
  --mock "$B/tools/mock_kafka/outbox-mock-kafka" --rows "$ROWS" --runs "$RUNS" \
  --rate 1000 --seconds 5 --rabbitmq "$OUTBOX_AMQP_URL" | sed '/^#### Latency/,$d')"

update_section rabbitmq_drain <<MD
### RabbitMQ delivery against Kafka: drain

Command: \`bench/run_rabbitmq_drain.sh --rows $ROWS --runs $RUNS\` (runs
\`build/release/bench/relay_bench --rabbitmq URL\`: the release \`outbox-relay\` with its
defaults — 4 workers, batch 500 — once to a private \`outbox-mock-kafka\` and once with
\`relay.transport = rabbitmq\` to the testenv's RabbitMQ 3.10 node, persistent messages
into one durable classic queue bound to the exchange (purged before each run); the bare
publisher sends the same number of messages of the same size, with the same properties
and headers, from one connection with confirms per window of 500; methods alternate
within each run, medians).
$machine

$out

The broker, PostgreSQL, the relay and the bench share the same 2 cores, and RabbitMQ
writes every persistent message to disk before its confirm.
MD
echo "updated $DOC" >&2
