#!/usr/bin/env bash
# The claim as a heap-only (HOT) update, in isolation: a copy of the outbox
# table (as of migration 12) with 100,000 rows, claimed 500 rows at a time and
# then marked SENT, in one session; µs per row for each update and how many of
# the 200,000 updates (claims and marks) were HOT: a mark can never be. Variants: fillfactor 100/80/50, the claim
# changing status or not, and (--phase) the partial indexes predicated on a
# generated column instead of status (what migration 13 tried; reverted, see
# docs/benchmarks.md, "Tried: the claim as a heap-only update").
# Uses $OUTBOX_PG_URL if set, else starts its own throwaway servers.
#   bench/experiments/hot_claim_isolation.sh [--rounds 2]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
ROUNDS=2
[ "${1:-}" = --rounds ] && ROUNDS="$2"
bench_env
machine_line
run() {  # run FILLFACTOR CLAIM_STATUS KIND(status|phase)
  local ff="$1" st="$2" kind="$3" gen="" p0 p1 p2 p3
  if [ "$kind" = phase ]; then
    gen=", phase smallint GENERATED ALWAYS AS (CASE status WHEN 'PENDING' THEN 0 WHEN 'PROCESSING' THEN 0 WHEN 'SENT' THEN 1 WHEN 'FAILED' THEN 2 ELSE 3 END) STORED"
    p0="phase = 0" p1="phase <> 1" p2="phase = 1" p3="(phase, seq) WHERE phase >= 2"
  else
    p0="status IN ('PENDING','PROCESSING')" p1="status <> 'SENT'" p2="status = 'SENT'"
    p3="(status, seq) WHERE status IN ('FAILED','SKIPPED')"
  fi
  PGOPTIONS="-c client_min_messages=warning" psql -X -q -v ON_ERROR_STOP=1 "$OUTBOX_PG_URL" >/dev/null <<SQL
DROP SCHEMA IF EXISTS hot_x CASCADE; CREATE SCHEMA hot_x;
CREATE TABLE hot_x.outbox (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, event_id uuid NOT NULL UNIQUE,
  aggregate_type text NOT NULL, aggregate_id text NOT NULL, event_type text NOT NULL,
  payload bytea NOT NULL, headers jsonb NOT NULL DEFAULT '{}', dedup_key text,
  status text NOT NULL DEFAULT 'PENDING', attempts integer NOT NULL DEFAULT 0,
  available_at timestamptz NOT NULL DEFAULT now(), lease_owner text, lease_token bigint,
  last_error text, created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  claimed_at timestamptz, sent_at timestamptz, failed_at timestamptz $gen) WITH (fillfactor = $ff);
CREATE INDEX ON hot_x.outbox (seq) WHERE $p0;
CREATE INDEX ON hot_x.outbox (aggregate_type, aggregate_id, seq) WHERE $p1;
CREATE UNIQUE INDEX ON hot_x.outbox (dedup_key) WHERE dedup_key IS NOT NULL;
CREATE INDEX ON hot_x.outbox (sent_at) WHERE $p2;
CREATE INDEX ON hot_x.outbox $p3;
INSERT INTO hot_x.outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers)
SELECT gen_random_uuid(), 'order', (g % 1000)::text, 'x', convert_to(repeat('p', 200), 'UTF8'),
       '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
FROM generate_series(1, 100000) g;
VACUUM ANALYZE hot_x.outbox;
CHECKPOINT;
SQL
  psql -X -q -At -v ON_ERROR_STOP=1 "$OUTBOX_PG_URL" <<SQL 2>&1 | sed -n 's/^NOTICE:  //p'
DO \$\$
DECLARE c float8 := 0; m float8 := 0; t0 timestamptz; ids bigint[]; hot bigint;
BEGIN
  FOR s IN 0..199 LOOP
    ids := ARRAY(SELECT g FROM generate_series(s * 500 + 1, s * 500 + 500) g);
    t0 := clock_timestamp();
    UPDATE hot_x.outbox o SET status = '$st', attempts = o.attempts + 1, lease_owner = 'w',
      lease_token = s, available_at = now() + interval '30 s', claimed_at = now()
    WHERE o.seq = ANY(ids);
    c := c + extract(epoch FROM clock_timestamp() - t0);
    t0 := clock_timestamp();
    UPDATE hot_x.outbox o SET status = 'SENT', sent_at = now() WHERE o.seq = ANY(ids) AND o.lease_token = s;
    m := m + extract(epoch FROM clock_timestamp() - t0);
  END LOOP;
  hot := pg_stat_get_xact_tuples_hot_updated('hot_x.outbox'::regclass);
  RAISE NOTICE '| % | % | % | % | % | % |', '$kind', $ff, '$st', round((c * 1e6 / 100000)::numeric, 1),
    round((m * 1e6 / 100000)::numeric, 1), hot;
END \$\$;
SQL
}
echo "| indexes read | fillfactor | claim sets status | claim µs/row | mark µs/row | HOT of the 200,000 updates |"
echo "|---|---|---|---|---|---|"
for r in $(seq 1 "$ROUNDS"); do
  run 100 PROCESSING status
  run 80 PENDING status
  run 50 PENDING status
  run 100 PROCESSING phase
  run 50 PROCESSING phase
done
psql -X -q "$OUTBOX_PG_URL" -c "DROP SCHEMA hot_x CASCADE" >/dev/null 2>&1
