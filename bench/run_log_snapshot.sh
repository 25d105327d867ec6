#!/usr/bin/env bash
# Issue 42: the log prototype under a held snapshot (enqueue -> hand-over
# latency, row writes per event) and its purge by rotation, beside today's
# store in the same run (bench/log_snapshot.cc says what each does). Writes
# the "log_snapshot" section of docs/benchmarks.md. Uses $OUTBOX_PG_URL if
# set, else starts its own servers.
#   bench/run_log_snapshot.sh [--rate 3000] [--seconds 40] [--purge-rows 200000]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RATE=3000 SECS=40 PURGE=200000
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) RATE="$2"; shift 2 ;;
    --seconds) SECS="$2"; shift 2 ;;
    --purge-rows) PURGE="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_build log_snapshot outbox-mock-kafka
bench_env
machine="$(machine_line)"  # before running: the commit that was built
table="$("$ROOT/build/release/bench/log_snapshot" --rate "$RATE" --seconds "$SECS" --purge-rows "$PURGE")"
update_section log_snapshot <<MD
### The outbox as a log under a held snapshot, and its purge by rotation (issue 42)

Command: \`bench/run_log_snapshot.sh --rate $RATE --seconds $SECS --purge-rows $PURGE\` (runs
\`build/release/bench/log_snapshot\`). $RATE events/s from 4 producer sessions (each event its
own transaction, 1,000 aggregates) for $SECS s; one drainer session hands them over — the
moment a relay gives them to its producer — idling as the relay's poller does (2 ms doubling
to 20 ms). The latency is the producer's clock at the enqueue to the drainer's at the
hand-over. "Snapshot held": a REPEATABLE READ transaction keeps its snapshot the whole run.
Row writes: the schema's \`n_tup_upd + n_tup_del\` per event (the inserts not counted).
Today's store: \`enqueue()\`, then Claim (ordered, 500) + MarkSent. The log: bench/log_drain.cc's
prototype in two partitions; \`enqueue_log()\` has \`enqueue()\`'s checks and lock and writes one
row; the drainer reads a range's page and writes the position once per page. Purge: today's by
\`PurgeSent\` (retention 0, batches of 1,000, what \`outboxctl purge\` runs); the log's by
rotating the current partition away and truncating the delivered one.
$machine

$table
MD
echo "$table"
