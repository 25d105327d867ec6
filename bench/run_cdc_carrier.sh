#!/usr/bin/env bash
# Reproduces the measurement behind the CDC carrier choice (docs/design.md,
# "CDC"): the WAL written per enqueued event when the stream reads the outbox
# table's INSERTs (what we ship) against the alternative that enqueue() also
# writes a transactional logical message carrying the event
# (pg_logical_emit_message). Medians of --runs runs of --events events.
#   bench/run_cdc_carrier.sh [--events 20000] [--runs 3]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
EVENTS=20000 RUNS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --events) EVENTS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_build
bench_env
machine="$(machine_line)"
S=bench_carrier
"$ROOT/build/release/tools/outbox_relay/outbox-relay" --db "$OUTBOX_PG_URL" --bootstrap 127.0.0.1:1 \
  --set database.schema=$S --set http.listen=127.0.0.1:0 --migrate >/dev/null 2>&1 &
relay=$!
for _ in $(seq 1 100); do
  psql "$OUTBOX_PG_URL" -Atc "select 1 from $S.schema_migrations where version = 5" 2>/dev/null | grep -q 1 && break
  sleep 0.1
done
kill $relay; wait $relay 2>/dev/null || true
# One event per transaction, 200-byte payload, a traceparent header: the common case.
measure() {  # $1 = extra statement per event ('' or the logical message)
  psql "$OUTBOX_PG_URL" -q -c "TRUNCATE $S.outbox" >/dev/null
  local before after
  before=$(psql "$OUTBOX_PG_URL" -Atc "select pg_current_wal_insert_lsn()")
  psql "$OUTBOX_PG_URL" -q >/dev/null <<SQL
DO \$\$
BEGIN
  FOR i IN 1..$EVENTS LOOP
    PERFORM $S.enqueue('order', 'o-' || (i % 1000), 'OrderChanged',
                       convert_to(repeat('x', 200), 'UTF8'),
                       '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}');
    $1
    COMMIT;
  END LOOP;
END
\$\$;
SQL
  after=$(psql "$OUTBOX_PG_URL" -Atc "select pg_current_wal_insert_lsn()")
  psql "$OUTBOX_PG_URL" -Atc "select round(pg_wal_lsn_diff('$after', '$before') / $EVENTS)"
}
MSG="PERFORM pg_logical_emit_message(true, 'outbox', convert_to(repeat('x', 200), 'UTF8'));"
rows=() both=()
for _ in $(seq 1 "$RUNS"); do
  rows+=("$(measure '')")
  both+=("$(measure "$MSG")")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
r=$(median "${rows[@]}") b=$(median "${both[@]}")
psql "$OUTBOX_PG_URL" -q -c "DROP PUBLICATION IF EXISTS outbox_$S" -c "DROP SCHEMA $S CASCADE" >/dev/null 2>&1
update_section cdc_carrier <<MD
### CDC carrier: the table's INSERTs or logical messages

Command: \`bench/run_cdc_carrier.sh --events $EVENTS --runs $RUNS\`.
$machine

| carrier | WAL per enqueued event (median of $RUNS) | runs |
|---|---|---|
| the outbox row's INSERT, read through the publication (shipped) | $r bytes | ${rows[*]} |
| the row plus a transactional \`pg_logical_emit_message\` with the payload | $b bytes | ${both[*]} |

One event per transaction (\`enqueue\` in a PL/pgSQL loop with \`COMMIT\` per event),
200-byte payload and a \`traceparent\` header, measured as the growth of
\`pg_current_wal_insert_lsn()\`. The row must be written either way (the table is the
source of truth for \`trace\`, dedup keys, FAILED rows and the sweeper), so a message
would only add its own WAL record; see docs/design.md, "CDC".
MD
echo "updated $DOC" >&2
