#!/usr/bin/env bash
# Reproduces "Enqueue: what one event costs the producer's transaction" in
# docs/benchmarks.md: the business INSERT alone, plus a hand-rolled outbox
# INSERT, plus enqueue(...) in SQL, plus the C++ Enqueue, plus EnqueueBatch of
# 10 (against a hand-rolled 10-row INSERT), and MariaDB's pair; durable commits
# off and on; interleaved rounds, medians. Uses $OUTBOX_PG_URL and
# $OUTBOX_MYSQL_URL if set, else starts its own throwaway servers.
#   bench/run_enqueue_cost.sh [--clients 4] [--seconds 10] [--rounds 3]
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
bench_build
bench_env
machine="$(machine_line)"  # before running: the commit that was built
out="$("$ROOT/build/release/bench/enqueue_cost" --clients "$CLIENTS" --seconds "$SECONDS_EACH" \
  --rounds "$ROUNDS" --before "$ROOT/src/store/postgres/migrations/outbox/0004_skipped_stats_limits.sql")"
update_section enqueue_cost <<MD
### Enqueue: what one event costs the producer's transaction

Command: \`bench/run_enqueue_cost.sh --clients $CLIENTS --seconds $SECONDS_EACH --rounds $ROUNDS\`
(runs \`build/release/bench/enqueue_cost\`).
$machine

Each client commits a business transaction — one INSERT of a ~200-byte row — in a loop for
$SECONDS_EACH s; each case adds one thing to that transaction. The event: a 200-byte payload,
one \`traceparent\` header, a random aggregate of 10,000, no dedup key. The hand-rolled outbox
is what a team writes without us: a uuid key, bytea payload, jsonb headers, a status and a
partial "pending" index. Cases and both durability settings alternate run by run, the tables
emptied before each; medians of $ROUNDS rounds. "µs added" is 1/rate minus the business
INSERT's 1/rate (machine time per transaction, as issue 26 measured it); the last column is
that added cost over the hand-rolled INSERT's. "Before migration 10" is \`enqueue()\` as
migrations 4–9 installed it, created beside the current one from
\`src/store/postgres/migrations/outbox/0004_skipped_stats_limits.sql\`.
$out
MD
echo "$out"
