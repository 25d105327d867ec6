#!/usr/bin/env bash
# Issue 42, steps 1 and 2: the outbox as a log, prototyped in SQL (bench/log_drain.cc
# says what it is) and measured beside today's claim + mark and the pipeline
# floor, before anything is built. Writes the "log_prototype" section of
# docs/benchmarks.md. Uses $OUTBOX_PG_URL if set, else starts its own servers.
#   bench/run_log_drain.sh [--rows 100000] [--runs 5] [--batch 500] [--slots 16]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROWS=100000 RUNS=5 BATCH=500 SLOTS=16
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --slots) SLOTS="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_build log_drain outbox-mock-kafka
bench_env
B="$ROOT/build/release"
machine="$(machine_line)"  # before running: the commit that was built
table="$("$B/bench/log_drain" --mock "$B/tools/mock_kafka/outbox-mock-kafka" --rows "$ROWS" --runs "$RUNS" \
  --batch "$BATCH" --slots "$SLOTS")"

update_section log_prototype <<MD
### The outbox as a log: the SQL prototype against today's claim + mark and the pipeline floor (issue 42, step 1)

Command: \`bench/run_log_drain.sh --rows $ROWS --runs $RUNS --batch $BATCH --slots $SLOTS\` (runs
\`build/release/bench/log_drain\`: one process, one session a method, the methods in
alternating order run by run, each over $ROWS freshly written events of 1,000 aggregates,
200-byte payloads; the log's events written 10 a transaction; a private
\`outbox-mock-kafka\`, 3 brokers, 32 partitions, and the relay's own Kafka producer).
$machine

$table

The prototype (bench/log_drain.cc): each event is one row of \`log\` with one index,
\`(slot, txid, pos)\`; a slot's position is one row holding two snapshots and a pos, and
a range is what is visible in the upper snapshot and not in the lower one, read in pos
order. Nothing is written per event after its INSERT. The workers' rows are the relay's
overlap (each worker its share of the slots, its own session, one shared producer); the
cursor's row reads each range once, in pos order, through a server-side cursor on a
read-only session, fetching the next page while the current one is published.
MD
echo "$table"
