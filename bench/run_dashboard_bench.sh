#!/usr/bin/env bash
# Reproduces the dashboard figures in docs/benchmarks.md: how long `outboxctl
# serve` takes to answer each API call the page makes, on an outbox of --rows
# rows (default 1,000,000: the issue's "usable with 1 million rows").
# Uses $OUTBOX_PG_URL if set, else starts its own throwaway cluster.
#   bench/run_dashboard_bench.sh [--rows 1000000] [--runs 5]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROWS=1000000 RUNS=5
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
case "$ROWS$RUNS" in *[!0-9]*) echo "--rows and --runs take whole numbers" >&2; exit 2 ;; esac
bench_build
bench_env
machine="$(machine_line)"
CTL="$ROOT/build/release/tools/outboxctl/outboxctl"
SCHEMA=bench_dashboard
psql -q "$OUTBOX_PG_URL" -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" 2>/dev/null
"$CTL" --db "$OUTBOX_PG_URL" --schema "$SCHEMA" migrate >/dev/null

# A relay's table after two hours: 98% SENT (by 4 relays), 1% FAILED (each
# holding its aggregate's later rows), 1% PENDING; 200-byte payloads.
echo "filling $ROWS rows ..." >&2
psql -q "$OUTBOX_PG_URL" <<SQL
INSERT INTO $SCHEMA.outbox (event_id, aggregate_type, aggregate_id, event_type, payload, dedup_key,
                            status, attempts, lease_owner, claimed_at, sent_at, failed_at,
                            last_error, created_at)
SELECT gen_random_uuid(), 'order', 'agg-' || (i % 10000), 'OrderPlaced',
       convert_to(repeat('x', 200), 'UTF8'), 'key-' || i,
       CASE i % 100 WHEN 0 THEN 'FAILED' WHEN 1 THEN 'PENDING' ELSE 'SENT' END,
       CASE i % 100 WHEN 1 THEN 0 ELSE 1 END,
       CASE i % 100 WHEN 1 THEN NULL ELSE 'relay-' || (i % 4) END,
       CASE i % 100 WHEN 1 THEN NULL ELSE t + interval '10 ms' END,
       CASE WHEN i % 100 > 1 THEN t + interval '20 ms' END,
       CASE i % 100 WHEN 0 THEN t + interval '1 s' END,
       CASE i % 100 WHEN 0 THEN 'MSG_SIZE_TOO_LARGE: the broker refused it' END,
       t
FROM (SELECT i, now() - ($ROWS - i) * (interval '7200 s' / $ROWS) AS t
      FROM generate_series(1, $ROWS) i) g;
ANALYZE $SCHEMA.outbox;
SQL
size="$(psql -At "$OUTBOX_PG_URL" -c "SELECT pg_size_pretty(pg_total_relation_size('$SCHEMA.outbox'))")"

LOG="$(mktemp /tmp/outbox-dashboard-bench.XXXXXX)"
"$CTL" --db "$OUTBOX_PG_URL" --schema "$SCHEMA" serve --listen 127.0.0.1:0 >"$LOG" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; rm -f "$LOG"' EXIT
for _ in $(seq 100); do grep -q 'http://' "$LOG" && break; sleep 0.1; done
PORT="$(sed -n 's|.*http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$LOG")"
[ -n "$PORT" ] || { cat "$LOG" >&2; exit 1; }

# Median of RUNS answer times (curl's time_total, ms) of one request.
time_ms() {
  local t=()
  for _ in $(seq "$RUNS"); do
    t+=("$(curl -s -o /dev/null -w '%{time_total}' "http://127.0.0.1:$PORT$1")")
  done
  printf '%s\n' "${t[@]}" | sort -g | awk '{a[NR]=$1} END {m=a[int((NR+1)/2)]; printf "%.1f", m*1000}'
  printf ' |'
  printf ' %s' "$(printf '%s\n' "${t[@]}" | awk '{printf "%s%.1f", (NR>1?", ":""), $1*1000}')"
}
key="key-$((ROWS / 2))"
rows=""
for path in "/api/status" "/api/activity" "/api/events?state=FAILED&limit=200" \
            "/api/events?state=PENDING&limit=200" "/api/trace?key=$key" "/"; do
  rows+="| \`GET ${path//|/\\|}\` | $(time_ms "$path") |"$'\n'
done

update_section dashboard <<MD
### Dashboard: \`outboxctl serve\`'s answers on a 1,000,000-row outbox

Command: \`bench/run_dashboard_bench.sh --rows $ROWS --runs $RUNS\` (the release \`outboxctl serve\`, asked with curl on the same machine).
$machine

The table: $ROWS rows ($size with its indexes) as two hours of a relay's work leave them —
98% SENT by 4 relays, 1% FAILED (each holding its aggregate's later rows), 1% PENDING.

| request (what the page asks) | median ms | runs (ms) |
|---|---|---|
$rows
\`/api/status\` counts every SENT row (\`outboxctl status\` does the same); \`/api/activity\`
reads the last hour through the partial indexes (SENT by \`sent_at\`, FAILED, unsent), the
page asks for it every 30 s and for the status every 5 s.
MD
echo "dashboard: docs/benchmarks.md updated" >&2
