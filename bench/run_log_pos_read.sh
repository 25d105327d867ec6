#!/usr/bin/env bash
# Issue 42's drain goal: the read in pos order (a page one statement from an
# index on (pos, slot), prototyped in bench/log_drain.cc's bench_log schema)
# beside the built log store, the pipeline floor and a bare DELETE, in one run
# (bench/log_drain.cc --store 2). Writes the "log_pos_read" section of
# docs/benchmarks.md. Uses $OUTBOX_PG_URL if set, else starts its own servers.
#   bench/run_log_pos_read.sh [--rows 100000] [--runs 3] [--batch 500]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
log_drain_run 2 "$@"

# The read's safety under concurrent producers (log_drain --live): everything
# once and in order, and each control losing events (each exits 0 only then).
live=""
for flags in "" " --stragglers 0" " --bounds-from-locks 0"; do
  # shellcheck disable=SC2086  # the flags are words
  live+="- \`log_drain --live 15$flags\`: $("$B/bench/log_drain" --live 15 $flags)"$'\n'
done

update_section log_pos_read <<MD
### The read in pos order against the built log store, the pipeline floor and a bare DELETE (issue 42, drain goal)

Command: \`bench/run_log_pos_read.sh --rows $ROWS --runs $RUNS --batch $BATCH\` (runs
\`build/release/bench/log_drain --store 2\`: one process, one session a method unless named,
the methods in alternating order run by run, each over $ROWS freshly written events of
1,000 aggregates, 200-byte payloads, 10 a transaction; a private \`outbox-mock-kafka\`, 3
brokers, 32 partitions, and the relay's own Kafka producer).
$machine

$table

The log store rows are the built store (log migration 7: its page read in pos order by
\`read_range()\`, docs/design.md, "The read in pos order"), through its \`Store\` interface as
a relay worker drives it; with 4 workers, four stores that took their shares of the 16
slots on the empty schema before the events were written. The pos-order rows are the
prototype it was built from (SQL in \`bench/log_drain.cc\`, \`DrainLogByPos\`): the prototype's log with an index on \`(pos, slot)\` added after the fill;
each slot's range is \`lo\`, \`hi\` and two reads of the pos sequence, \`lo_pos\` (taken
before \`lo\`) and \`hi_pos\` (after \`hi\`); a page is one statement, the owned slots'
events with \`lo_pos\` < pos ≤ \`hi_pos\`, visible in \`hi\` and not in \`lo\`, in pos order
straight from the index, plus the stragglers: the events of the transactions running when
\`lo\` was taken (from its running list and from \`pg_locks\`, read between the sequence and
the snapshot) that drew their pos before it, each read over its own pos span through the
same index; one position write per slot per page, as the built store.

Its safety under concurrent producers (\`log_drain --live 15\`: two producers writing
transactions of 1–10 events over 200 aggregates while a third holds a transaction open for
0.75 s around five events, every producer assigning its xid first and taking its
aggregates' locks before its INSERT; one session drains in pos order meanwhile; then every
committed event is checked to have been handed out once, and each aggregate's in pos
order, and that some were stragglers). The producers' choices are seeded (the seed is
printed; a run of the same seed and length writes about the same events: the long
transaction's lock sets the pace). The two controls must lose events: without the
stragglers' branch, and with the stragglers' bounds taken from the snapshots' running
lists alone.
$live
MD
echo "$table"
