#!/usr/bin/env bash
# Reproduces the store figures in docs/benchmarks.md: the claim race (seed's
# measurement on PostgreSQL) and the store-only drain floor vs the database's
# ceiling. Uses $OUTBOX_PG_URL if set, else starts its own throwaway cluster.
#   bench/run_store_bench.sh [--rows 200000] [--runs 3] [--batch 500]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROWS=200000 RUNS=3 BATCH=500
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_build
bench_env
B="$ROOT/build/release/bench"
machine="$(machine_line)"  # before running: the commit that was built

race="$("$B/claim_race" --rows 300 --threads 10 --batch 10)"
drain="$("$B/store_drain" --rows "$ROWS" --runs "$RUNS" --batch "$BATCH")"
enqueue="$("$B/enqueue_bench" --producers 4 --events 20000 --per-txn 10 --runs "$RUNS")"

update_section claim_race <<MD
### Claim race (seed's measurement, on PostgreSQL)

Command: \`bench/run_store_bench.sh\` (runs \`build/release/bench/claim_race --rows 300 --threads 10 --batch 10\`).
$machine

$race

Every row handed to a worker counts as a claim. The atomic claim hands each row
out once; the naive find-then-update hands the same rows to several workers,
as the seed measured on MongoDB (300 rows, 10 workers: 2182 claims, 1882 duplicates).
MD

update_section store_drain <<MD
### Store-only drain floor (no broker)

Command: \`bench/run_store_bench.sh --rows $ROWS --runs $RUNS --batch $BATCH\` (runs \`build/release/bench/store_drain\`).
$machine

$drain

A pre-filled outbox of $ROWS rows (200-byte payload, 1000 aggregates interleaved)
drained by one session in a loop of Claim($BATCH) + MarkSent, relay and database on
the same 2 cores. Methods run interleaved, run by run, in one process; medians of
$RUNS runs. The ceiling is a bare batched \`DELETE … RETURNING\` of the same rows
from one connection (no lease, no order, no fencing): what the database can do at
best with one write per row.
MD
update_section enqueue <<MD
### Enqueue cost, and the opt-in NOTIFY

Command: \`bench/run_store_bench.sh\` (runs \`build/release/bench/enqueue_bench --producers 4 --events 20000 --per-txn 10 --runs $RUNS\`).
$machine

$enqueue

Four connections commit transactions of 10 events each through \`EnqueueBatch\` (the SQL
function, per-aggregate advisory lock, 200-byte payloads), with the setting
\`outbox.notify\` off and on, alternating run by run; medians of $RUNS runs. With it on,
every committing transaction sends one notification (PostgreSQL collapses the
duplicates within a transaction) and takes the notification queue's lock at commit.
MD
echo "updated $DOC" >&2
