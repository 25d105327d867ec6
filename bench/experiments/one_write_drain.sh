#!/usr/bin/env bash
# What a claim that writes less would buy the polling drain (issue 26's drain
# goal). One session drains --rows PENDING rows (1,000 aggregates, 200-byte
# payloads) in batches of 500, no broker, four ways, in alternating rounds:
#   claim+mark  the store's claim (claim_ordered(): per-aggregate heads, lease,
#               token) committed, then the store's mark to SENT: two writes a row;
#   two-writes  the oldest 500 by seq, FOR UPDATE SKIP LOCKED, set PROCESSING
#               with a lease (the claim's columns) and committed, then SENT:
#               two writes a row, without claim_ordered()'s search;
#   one-write   the same 500 locked FOR UPDATE SKIP LOCKED and set SENT in the
#               same transaction: one write a row (the lock, not a lease, holds
#               them while they would be published).
#   batch-lease one small lease row per batch (its token, owner, expiry and the
#               array of its seqs) committed, under a table-wide advisory lock,
#               by a claim that skips the seqs of every active lease; then, in
#               one statement, the lease deleted (the fence: no row, no mark)
#               and its rows set SENT: one write a row, no transaction open
#               across the publish, a crash leaves the lease to expire.
# Rows per second: the rows sent over the run's time (pgbench -t, one batch per
# transaction). Medians.
# Uses $OUTBOX_PG_URL if set, else starts its own throwaway servers.
#   bench/experiments/one_write_drain.sh [--rows 100000] [--rounds 3]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
ROWS=100000 ROUNDS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_env
machine_line
PGB="$(ls /usr/lib/postgresql/*/bin/pgbench | tail -1)"
U="$OUTBOX_PG_URL"
S=one_write
psql -X -q "$U" -c "DROP SCHEMA IF EXISTS $S CASCADE" 2>/dev/null
"$ROOT/build/release/tools/outboxctl/outboxctl" --db "$U" --schema "$S" migrate | tail -1
psql -X -q "$U" -c "CREATE TABLE $S.batch_lease (token bigint PRIMARY KEY, owner text NOT NULL, expires_at timestamptz NOT NULL, seqs bigint[] NOT NULL)"
mark="UPDATE $S.outbox o SET status = 'SENT', sent_at = coalesce(o.sent_at, now()), last_error = NULL
  WHERE o.seq = ANY(:seqs::bigint[])
    AND o.lease_token = (:toks::bigint[])[array_position(:seqs::bigint[], o.seq)]
    AND o.status IN ('PROCESSING', 'SENT');"
script() {
  case "$1" in
    claim+mark)
      echo "SELECT coalesce(array_agg(seq), '{}') AS seqs, coalesce(array_agg(lease_token), '{}') AS toks FROM $S.claim_ordered(500, 'bench', 30000, 10, true, 100000000, 0, 0) \\gset"
      echo "$mark" ;;
    two-writes)
      echo "WITH picked AS (SELECT seq FROM $S.outbox WHERE status IN ('PENDING', 'PROCESSING') AND available_at <= now() ORDER BY seq LIMIT 500 FOR UPDATE SKIP LOCKED), token AS (SELECT nextval('$S.lease_token_seq') AS t), c AS (UPDATE $S.outbox o SET status = 'PROCESSING', attempts = o.attempts + 1, lease_owner = 'bench', lease_token = token.t, available_at = now() + interval '30 s', claimed_at = now() FROM picked, token WHERE o.seq = picked.seq RETURNING o.seq, o.lease_token) SELECT coalesce(array_agg(seq), '{}') AS seqs, coalesce(array_agg(lease_token), '{}') AS toks FROM c \\gset"
      echo "$mark" ;;
    batch-lease)
      echo "BEGIN;"
      echo "SELECT pg_advisory_xact_lock(7261);"
      echo "SELECT coalesce(array_agg(seq), '{}') AS seqs FROM (SELECT seq FROM $S.outbox WHERE status IN ('PENDING', 'PROCESSING') AND available_at <= now() AND seq <> ALL (coalesce((SELECT array_agg(x) FROM $S.batch_lease l, unnest(l.seqs) x WHERE l.expires_at > now()), '{}')) ORDER BY seq LIMIT 500) p \\gset"
      echo "INSERT INTO $S.batch_lease (token, owner, expires_at, seqs) VALUES (nextval('$S.lease_token_seq'), 'bench', now() + interval '30 s', :seqs::bigint[]) RETURNING token \\gset"
      echo "COMMIT;"
      echo "WITH l AS (DELETE FROM $S.batch_lease WHERE token = :token RETURNING seqs) UPDATE $S.outbox o SET status = 'SENT', sent_at = now(), attempts = o.attempts + 1, lease_owner = 'bench' FROM l WHERE o.seq = ANY(l.seqs);" ;;
    one-write)
      echo "BEGIN;"
      echo "SELECT coalesce(array_agg(seq), '{}') AS seqs FROM (SELECT seq FROM $S.outbox WHERE status IN ('PENDING', 'PROCESSING') AND available_at <= now() ORDER BY seq LIMIT 500 FOR UPDATE SKIP LOCKED) p \\gset"
      echo "UPDATE $S.outbox o SET status = 'SENT', sent_at = now(), lease_owner = 'bench', attempts = o.attempts + 1 WHERE o.seq = ANY(:seqs::bigint[]);"
      echo "COMMIT;" ;;
  esac
}
raw=""
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="claim+mark two-writes batch-lease one-write"; else order="one-write batch-lease two-writes claim+mark"; fi
  for c in $order; do
    psql -X -q "$U" -c "TRUNCATE $S.outbox, $S.batch_lease" -c "INSERT INTO $S.outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers)
      SELECT $S.uuid_v7(), 'order', (g % 1000)::text, 'OrderCreated', convert_to(repeat('x', 200), 'UTF8'), '{}'
      FROM generate_series(1, $ROWS) g" -c "VACUUM ANALYZE $S.outbox" -c "CHECKPOINT"
    tps="$("$PGB" -n -M extended -c 1 -j 1 -t $((ROWS / 500)) -f <(script "$c") "$U" | awk '/^tps/ {print $3; exit}')"
    left="$(psql -X -At "$U" -c "SELECT count(*) FROM $S.outbox WHERE status <> 'SENT'")"
    [ "$left" = 0 ] || echo "$c: $left rows not SENT after $((ROWS / 500)) batches" >&2
    # rows sent per second: the rows sent over the run's time (transactions / tps)
    raw+="$c $(awk -v sent=$((ROWS - left)) -v tps="$tps" -v n=$((ROWS / 500)) 'BEGIN {printf "%.0f", sent * tps / n}')"$'\n'
  done
done
psql -X -q "$U" -c "DROP SCHEMA $S CASCADE" 2>/dev/null
awk '
  function median(s,   n, a, i, j, t) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  { v[$1] = v[$1] " " $2 }
  END {
    base = median(v["claim+mark"])
    print "| drain, one session, no broker | rows/s (median) | each round | / claim+mark |"
    print "|---|---|---|---|"
    split("claim+mark two-writes batch-lease one-write", order, " ")
    for (i = 1; i <= 4; i++) { c = order[i]; printf "| %s | %.0f |%s | %.2f |\n", c, median(v[c]), v[c], median(v[c]) / base }
  }' <<<"$raw"
