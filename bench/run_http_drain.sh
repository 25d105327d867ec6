#!/usr/bin/env bash
# Reproduces "HTTP delivery against Kafka: drain" in docs/benchmarks.md: the same
# pre-filled outbox drained by outbox-relay to outbox-mock-kafka and, with
# relay.transport = http, to a receiver in the bench process that answers 200 at
# once; the store-only floor and the database's ceiling in the same run.
#   bench/run_http_drain.sh [--rows 100000] [--runs 3]
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
bench_build
bench_env
B="$ROOT/build/release"
machine="$(machine_line)"
out="$("$B/bench/relay_bench" --relay "$B/tools/outbox_relay/outbox-relay" \
  --mock "$B/tools/mock_kafka/outbox-mock-kafka" --rows "$ROWS" --runs "$RUNS" \
  --rate 1000 --seconds 5 --http-drain 1 | sed '/^#### Latency/,$d')"

update_section http_drain <<MD
### HTTP delivery against Kafka: drain

Command: \`bench/run_http_drain.sh --rows $ROWS --runs $RUNS\` (runs
\`build/release/bench/relay_bench --http-drain 1\`: the release \`outbox-relay\` with its
defaults — 4 workers, batch 500, \`http_delivery.concurrency\` 8 — once to a private
\`outbox-mock-kafka\` and once with \`relay.transport = http\` to an HTTP server in the
bench process that answers 200 at once; methods alternate within each run, medians).
$machine

$out

The receiver does no work (64 threads, no limit on requests per keep-alive connection),
so this is the transport's own cost: one HTTP request per
event, at most \`concurrency\` aggregates of a batch at once and one request in flight per
aggregate, against Kafka's batched produce. Everything shares the same 2 cores.
MD
echo "updated $DOC" >&2
