#!/usr/bin/env bash
# Would the drain gain if a claim's batch lay close together in the table?
# claim_ordered() takes a head and its run, so with interleaved aggregates a
# batch of 500 is a few aggregates' events spread over the whole backlog; each
# row written lands on its own page. One session drains --rows PENDING rows
# (--aggregates, 200-byte payloads) with claim_ordered() and the store's mark
# to SENT, batches of 500, no broker, two ways in alternating rounds:
#   as-is   claim_ordered() as the migrations install it;
#   window  the same function with each head's run kept inside the window
#           (the oldest unsent rows), so a batch's rows lie near each other.
# Rows per second: the rows sent over the run's time (pgbench -t).
# Uses $OUTBOX_PG_URL if set, else starts its own throwaway servers.
#   bench/experiments/runs_in_window.sh [--rows 100000] [--aggregates 1000] [--rounds 3]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
ROWS=100000 AGGS=1000 ROUNDS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS="$2"; shift 2 ;;
    --aggregates) AGGS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_env
machine_line
PGB="$(ls /usr/lib/postgresql/*/bin/pgbench | tail -1)"
U="$OUTBOX_PG_URL"
for S in runs_as_is runs_window; do
  psql -X -q -v ON_ERROR_STOP=1 "$U" -c "DROP SCHEMA IF EXISTS $S CASCADE" 2>/dev/null
  "$ROOT/build/release/tools/outboxctl/outboxctl" --db "$U" --schema "$S" migrate | tail -1
done
# The variant: migration 9's claim_ordered() with one more condition on the run.
python3 - "$ROOT/src/store/postgres/migrations/outbox/0009_claim_window.sql" <<'PY' | psql -X -q -v ON_ERROR_STOP=1 "$U"
import sys
s = open(sys.argv[1]).read()
s = s[s.index('CREATE OR REPLACE FUNCTION'):]
run = "              AND x.seq > h.seq AND x.status NOT IN ('SENT', 'SKIPPED')"
assert s.count(run) == 1, "claim_ordered() changed: update this experiment"
s = s.replace(run, run + "\n              AND (v_pass = 2 OR v_end IS NULL OR x.seq <= v_end)")
print(s.replace('{S}', 'runs_window'))
PY
raw=""
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="runs_as_is runs_window"; else order="runs_window runs_as_is"; fi
  for S in $order; do
    psql -X -q -v ON_ERROR_STOP=1 "$U" -c "TRUNCATE $S.outbox" -c "INSERT INTO $S.outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers)
      SELECT $S.uuid_v7(), 'order', (g % $AGGS)::text, 'OrderCreated', convert_to(repeat('x', 200), 'UTF8'), '{}'
      FROM generate_series(1, $ROWS) g" -c "VACUUM ANALYZE $S.outbox" -c "CHECKPOINT"
    script="SELECT coalesce(array_agg(seq), '{}') AS seqs, coalesce(array_agg(lease_token), '{}') AS toks FROM $S.claim_ordered(500, 'bench', 30000, 10, true, 100000000, 0, 0) \\gset
UPDATE $S.outbox o SET status = 'SENT', sent_at = coalesce(o.sent_at, now()), last_error = NULL WHERE o.seq = ANY(:seqs::bigint[]) AND o.lease_token = (:toks::bigint[])[array_position(:seqs::bigint[], o.seq)] AND o.status IN ('PROCESSING', 'SENT');"
    tps="$("$PGB" -n -M extended -c 1 -j 1 -t $((ROWS / 500)) -f <(echo "$script") "$U" | awk '/^tps/ {print $3; exit}')"
    left="$(psql -X -At "$U" -c "SELECT count(*) FROM $S.outbox WHERE status <> 'SENT'")"
    [ "$left" = 0 ] || echo "$S: $left rows not SENT after $((ROWS / 500)) batches" >&2
    raw+="$S $(awk -v sent=$((ROWS - left)) -v tps="$tps" -v n=$((ROWS / 500)) 'BEGIN {printf "%.0f", sent * tps / n}')"$'\n'
  done
done
for S in runs_as_is runs_window; do psql -X -q -v ON_ERROR_STOP=1 "$U" -c "DROP SCHEMA $S CASCADE" 2>/dev/null; done
awk '
  function median(s,   n, a, i, j, t) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  { v[$1] = v[$1] " " $2 }
  END {
    base = median(v["runs_as_is"])
    print "| drain, one session, no broker | rows/s (median) | each round | / as-is |"
    print "|---|---|---|---|"
    split("runs_as_is runs_window", order, " ")
    for (i = 1; i <= 2; i++) { c = order[i]; printf "| %s | %.0f |%s | %.2f |\n", c, median(v[c]), v[c], median(v[c]) / base }
  }' <<<"$raw"
