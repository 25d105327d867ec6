#!/usr/bin/env bash
# Issue 42, step 4: the built log store (src/store/postgres/log_store.cc)
# drained beside today's row store, the pipeline floor and a bare DELETE, in one
# run (bench/log_drain.cc --store 1). Writes the "log_store_drain" section of
# docs/benchmarks.md. Uses $OUTBOX_PG_URL if set, else starts its own servers.
#   bench/run_log_store_drain.sh [--rows 100000] [--runs 3] [--batch 500]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
log_drain_run 1 "$@"

update_section log_store_drain <<MD
### The built log store against today's store, the pipeline floor and a bare DELETE (issue 42, step 4)

Command: \`bench/run_log_store_drain.sh --rows $ROWS --runs $RUNS --batch $BATCH\` (runs
\`build/release/bench/log_drain --store 1\`: one process, one session a method, the methods
in alternating order run by run, each over $ROWS freshly written events of 1,000
aggregates, 200-byte payloads; the log store's events written by \`enqueue()\`, 10 a
transaction; a private \`outbox-mock-kafka\`, 3 brokers, 32 partitions, and the relay's own
Kafka producer).
$machine

$table

The log store is \`outboxctl migrate --layout log\`'s schema drained through its \`Store\`
interface exactly as a relay worker does (Claim, Publish, MarkSent; 16 slots, all held by
the one session). Its row writes are every update and delete on the log schema's tables
during the drain (pg_stat_user_tables): the slots' positions, moved once per page per
slot with events in it, and the leases.
MD
echo "$table"
