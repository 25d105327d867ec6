#!/usr/bin/env bash
# Issue 42's drain goal: the read in pos order (a page one statement from an
# index on (pos, slot), prototyped in bench/log_drain.cc's bench_log schema)
# beside the built log store, the pipeline floor and a bare DELETE, in one run
# (bench/log_drain.cc --store 2). Writes the "log_pos_read" section of
# docs/benchmarks.md. Uses $OUTBOX_PG_URL if set, else starts its own servers.
#   bench/run_log_pos_read.sh [--rows 100000] [--runs 3] [--batch 500]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROWS=100000 RUNS=3 BATCH=500
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_build log_drain outbox-mock-kafka
bench_env
B="$ROOT/build/release"
machine="$(machine_line)"  # before running: the commit that was built
table="$("$B/bench/log_drain" --store 2 --mock "$B/tools/mock_kafka/outbox-mock-kafka" --rows "$ROWS" \
  --runs "$RUNS" --batch "$BATCH")"

update_section log_pos_read <<MD
### The read in pos order against the built log store, the pipeline floor and a bare DELETE (issue 42, drain goal)

Command: \`bench/run_log_pos_read.sh --rows $ROWS --runs $RUNS --batch $BATCH\` (runs
\`build/release/bench/log_drain --store 2\`: one process, one session a method unless named,
the methods in alternating order run by run, each over $ROWS freshly written events of
1,000 aggregates, 200-byte payloads, 10 a transaction; a private \`outbox-mock-kafka\`, 3
brokers, 32 partitions, and the relay's own Kafka producer).
$machine

$table

The pos-order rows are a prototype (SQL in \`bench/log_drain.cc\`, \`DrainLogByPos\`), not
the built store: the prototype's log with an index on \`(pos, slot)\` added after the fill;
each slot's range is \`lo\`, \`hi\` and two reads of the pos sequence, \`lo_pos\` (taken
before \`lo\`) and \`hi_pos\` (after \`hi\`); a page is one statement, the owned slots'
events with \`lo_pos\` < pos ≤ \`hi_pos\`, visible in \`hi\` and not in \`lo\`, in pos order
straight from the index, plus the events of the transactions \`lo\` saw running that drew
their pos before it (by txid); one position write per slot per page, as the built store.
MD
echo "$table"
