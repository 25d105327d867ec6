#!/usr/bin/env bash
# What a relay worker's first claim with rows costs over its later ones: the
# tail of a new relay's first 100 ms (docs/benchmarks.md, "Latency with the
# defaults"). Per round, one fresh session does what a worker does after it
# starts: a claim that finds nothing (the relay's idle poll), then, once
# --rows rows are due, three claims of batch --batch, each timed by psql.
# The rows wait with available_at an hour ahead and are made due by another
# session, as a producer's commit would.
# Uses $OUTBOX_PG_URL if set, else starts its own throwaway servers.
#   bench/experiments/first_claim.sh [--rows 30] [--batch 5] [--rounds 5]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
ROWS=30 BATCH=5 ROUNDS=5
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_env
machine_line
U="$OUTBOX_PG_URL" S=first_claim
psql -X -q -v ON_ERROR_STOP=1 "$U" -c "DROP SCHEMA IF EXISTS $S CASCADE" 2>/dev/null
"$ROOT/build/release/tools/outboxctl/outboxctl" --db "$U" --schema "$S" migrate | tail -1
claim="SELECT count(*) FROM $S.claim_ordered($BATCH, 'bench', 30000, 10, true, 100000000, 0, 0);"
echo "| round | 1st claim with rows, ms | 2nd | 3rd |"
echo "|---|---|---|---|"
for r in $(seq 1 "$ROUNDS"); do
  psql -X -q -v ON_ERROR_STOP=1 "$U" -c "TRUNCATE $S.outbox" -c "INSERT INTO $S.outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers, available_at)
    SELECT $S.uuid_v7(), 'order', (g % 1000)::text, 'OrderCreated', convert_to(repeat('x', 200), 'UTF8'), '{}', now() + interval '1 hour'
    FROM generate_series(1, $ROWS) g" -c "VACUUM ANALYZE $S.outbox"
  times="$(psql -X -q -v ON_ERROR_STOP=1 "$U" <<SQL | awk '/^Time:/ {print $2}' | paste -sd' '
$claim
\\! psql -X -q -v ON_ERROR_STOP=1 "$U" -c "UPDATE $S.outbox SET available_at = now() - interval '1 s'"
\\timing on
$claim
$claim
$claim
SQL
)"
  echo "| $r | ${times// / | } |"
done
psql -X -q -v ON_ERROR_STOP=1 "$U" -c "DROP SCHEMA $S CASCADE" 2>/dev/null
