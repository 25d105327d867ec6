#!/usr/bin/env bash
# Issue 42: what the log prototype's enqueue, and the built log schema's
# enqueue(), add to a business transaction, beside today's enqueue() and the
# hand-rolled outbox INSERT
# (build/release/bench/enqueue_cost --log 1: the same clients, rounds and
# medians as run_enqueue_cost.sh, PostgreSQL only). Writes the
# "log_enqueue_cost" section of docs/benchmarks.md. Uses $OUTBOX_PG_URL if
# set, else starts its own servers.
#   bench/run_log_enqueue_cost.sh [--clients 4] [--seconds 10] [--rounds 3]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
CLIENTS=4 SECONDS_EACH=10 ROUNDS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --clients) CLIENTS="$2"; shift 2 ;;
    --seconds) SECONDS_EACH="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_build enqueue_cost outbox-mock-kafka
bench_env
machine="$(machine_line)"  # before running: the commit that was built
out="$("$ROOT/build/release/bench/enqueue_cost" --log 1 --clients "$CLIENTS" --seconds "$SECONDS_EACH" \
  --rounds "$ROUNDS")"
update_section log_enqueue_cost <<MD
### The outbox as a log: what its enqueue adds to the producer's transaction (issue 42)

Command: \`bench/run_log_enqueue_cost.sh --clients $CLIENTS --seconds $SECONDS_EACH --rounds $ROUNDS\`
(runs \`build/release/bench/enqueue_cost --log 1\`; the cases, clients and medians of
"Enqueue: what one event costs the producer's transaction", PostgreSQL only).
$machine

The log is bench/log_drain.cc's prototype table: each event one row, one index
\`(slot, txid, pos)\`, \`pos\` from a sequence, \`txid\` = \`pg_current_xact_id()\`.
\`enqueue_log(...)\` is \`enqueue()\` writing there: the same checks (\`enqueue_ok\`, then
\`enqueue_refuse\`), the aggregate's advisory lock, the slot from the lock's hash (16 slots),
a UUIDv7 event id, no dedup key (the design keeps dedup keys in a table of their own,
written only for events that carry one).

The last two cases are the built log layout: a schema made by \`outboxctl migrate --layout
log\` (its partitioned \`log\` table with one b-tree a partition, \`(pos, slot)\` since log
migration 8, dedup keys in their own table), written by its own \`enqueue()\` — the same
signature, checks, messages and lock as the row store's; since log migration 7 it assigns
the transaction's id before it draws a pos — from SQL, and from C++ \`Enqueue\` (which
calls it).
$out
MD
echo "$out"
