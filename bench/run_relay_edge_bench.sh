#!/usr/bin/env bash
# Reproduces the "relay past its envelope" figures in docs/benchmarks.md: a hot
# aggregate against spread ones (workers 1 and 4), large events and the relay's
# peak RSS, and purge + stats on a table with millions of retained SENT rows.
#   bench/run_relay_edge_bench.sh [--runs 3] [--large-rows 2000] [--sent-rows 5000000]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RUNS=3 LARGE=2000 SENT=5000000
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --large-rows) LARGE="$2"; shift 2 ;;
    --sent-rows) SENT="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_build
bench_env
B="$ROOT/build/release"
machine="$(machine_line)"
run() {
  "$B/bench/relay_edge_bench" --relay "$B/tools/outbox_relay/outbox-relay" \
    --mock "$B/tools/mock_kafka/outbox-mock-kafka" "$@"
}
hot="$(run --scenario hot --runs "$RUNS")"
large="$(run --scenario large --runs "$RUNS" --large-rows "$LARGE")"
big="$(run --scenario bigtable --sent-rows "$SENT")"

update_section relay_edge <<MD
### Relay past its envelope: hot aggregate, large events, big table

Command: \`bench/run_relay_edge_bench.sh --runs $RUNS --large-rows $LARGE --sent-rows $SENT\`
(runs \`build/release/bench/relay_edge_bench\` with the release \`outbox-relay\` and a
private \`outbox-mock-kafka\`, 3 brokers, 32 partitions).
$machine

#### A hot aggregate (20,000 events, 200-byte payloads; median of $RUNS runs, cases alternating)

$hot

The hot case interleaves 10,000 events of one aggregate with 10,000 spread over 1,000
others (seq order); the spread case is 20,000 spread over 1,000 aggregates, of which
the odd-numbered 10,000 are timed. Time is from starting the relay until the
measured 10,000 are SENT. A hot aggregate is sequential by nature (one batch in
flight at a time, at most \`batch_size\` events per batch).

#### Large events ($LARGE events of 1,000,000-byte payloads, relay defaults)

$large

The payloads are one repeated byte, which PostgreSQL's TOAST compresses on disk; the
relay still fetches, holds and produces each as 1,000,000 bytes. The claim stops at
\`relay.batch_bytes\` (8 MiB) per worker, payloads arrive in binary, and librdkafka's
queue is bounded (\`queue.buffering.max.kbytes=65536\`).

#### Purge and stats with millions of retained SENT rows

$big

The SENT rows are 8 days old (retention 7 days); the relay runs with
\`retention.purge_interval_s=1\` while one producer offers the load shown (it aims at
5,000 events/s, 50 per transaction every 10 ms; the figure is what it reached); "all
purged after" is from starting the relay. \`stats()\` is timed from a separate session.
On a shared 2-core machine the producer, the relay, its purge and PostgreSQL compete
for the same cores, so the producer may not reach 5,000 events/s; compare the purge
rate with the ingest it must outpace (2 × 5,000 = 10,000 rows/s).
MD
echo "updated $DOC" >&2
