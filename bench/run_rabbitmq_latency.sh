#!/usr/bin/env bash
# Reproduces "RabbitMQ delivery: latency at 1,000 events/s" in docs/benchmarks.md:
# enqueue → marked SENT (after the broker's confirm) at --rate events/s, the relay
# with its defaults delivering to the testenv's RabbitMQ node (persistent
# messages, a durable queue bound to the exchange) and, in alternate rounds, to
# outbox-mock-kafka; and a bare publisher's own publish -> confirm latency at the
# same rate (the broker alone); medians of the rounds. Issue 43's goal: p99 <= 20 ms.
#   bench/run_rabbitmq_latency.sh [--rounds 3] [--seconds 10] [--rate 1000]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROUNDS=3 SECS=10 RATE=1000
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --seconds) SECS="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
rabbitmq_bench_setup  # sets B and machine
RAW="$(mktemp)"
one() {  # transport
  local extra=()
  case "$1" in
    rabbitmq) extra=(--rabbitmq "$OUTBOX_AMQP_URL"
                     --relay-set "relay.transport=rabbitmq,rabbitmq.url=$OUTBOX_AMQP_URL") ;;
    transient) extra=(--rabbitmq "$OUTBOX_AMQP_URL" --rabbitmq-queue transient
                      --relay-set "relay.transport=rabbitmq,rabbitmq.url=$OUTBOX_AMQP_URL") ;;
    bare) extra=(--rabbitmq "$OUTBOX_AMQP_URL" --bare-latency 1) ;;
  esac
  "$B/bench/relay_bench" --relay "$B/tools/outbox_relay/outbox-relay" \
    --mock "$B/tools/mock_kafka/outbox-mock-kafka" --rows 0 --seconds "$SECS" --rate "$RATE" \
    --warmup 2 "${extra[@]}" | grep -E '^\| [0-9.]+ events/s' |
    awk -F'|' -v t="$1" '{ gsub(/ ms| /, "", $4); gsub(/ ms| /, "", $5); gsub(/ ms| /, "", $6);
                           print t, $4, $5, $6 }' >>"$RAW"
}
for round in $(seq 1 "$ROUNDS"); do
  for t in kafka rabbitmq transient bare; do
    one "$t"
    echo "round $round: $(tail -1 "$RAW")" >&2
  done
done
table="$(python3 - "$RAW" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    t, p50, p99, mx = line.split()
    rows.setdefault(t, []).append((float(p50), float(p99), float(mx)))
names = {"kafka": "outbox-relay → outbox-mock-kafka",
         "rabbitmq": "outbox-relay → RabbitMQ (confirms), a durable queue",
         "transient": "outbox-relay → RabbitMQ (confirms), a non-durable queue (no disk write)",
         "bare": "bare publisher → RabbitMQ, a durable queue: each message sent when due, confirms read between sends, due → confirm (no outbox, no database)"}
print("| transport | p50 (median of rounds) | p99 (median) | p99 per round | max (median) |")
print("|---|---|---|---|---|")
for t in ("kafka", "rabbitmq", "transient", "bare"):
    r = rows.get(t, [])
    if not r: continue
    print("| %s | %.1f ms | %.1f ms | %s | %.1f ms |" % (names[t],
          statistics.median(x[0] for x in r), statistics.median(x[1] for x in r),
          ", ".join("%.1f" % x[1] for x in r), statistics.median(x[2] for x in r)))
PY
)"
rm -f "$RAW"
update_section rabbitmq_latency <<MD
### RabbitMQ delivery: latency at ${RATE} events/s

Command: \`bench/run_rabbitmq_latency.sh --rounds $ROUNDS --seconds $SECS --rate $RATE\` (one
\`build/release/bench/relay_bench --rows 0 --warmup 2\` per transport and round, rounds
alternating: enqueue → marked SENT, from the database clock, of the events offered for
$SECS s after a 2-s warm-up; the release \`outbox-relay\` with its defaults; RabbitMQ:
persistent messages into a durable queue bound to the exchange; medians of the rounds).
$machine

$table

The mark follows the broker's confirm, so this bounds enqueue → confirm from above. The
non-durable queue is the experiment that tells what the disk costs: RabbitMQ confirms a
persistent message routed to a durable queue only once it is written and synced.
MD
echo "updated $DOC" >&2
