#!/usr/bin/env bash
# Reproduces "What a relay costs the database between events" in
# docs/benchmarks.md:
#  1. an idle poll: one empty claim (claim_ordered() on an empty outbox)
#     against `SELECT 1`, round trip, pgbench with one client, alternating;
#  2. the gauges' query, stats(), on --rows unsent rows (3 calls, median);
#  3. what the gauges cost over --seconds: the release outbox-relay (and, with
#     --base-relay, another build's, one after the other) on that backlog with
#     the broker unreachable (the rows stay), stats()'s calls and time from
#     pg_stat_user_functions (track_functions = all in the relays' sessions).
#   bench/run_housekeeping_cost.sh [--rows 1000000] [--seconds 40] [--rounds 3]
#                                  [--base-relay BIN --base-name NAME]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROWS=1000000 SECS=40 ROUNDS=3 BASE_RELAY="" BASE_NAME="base"
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS="$2"; shift 2 ;;
    --seconds) SECS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --base-relay) BASE_RELAY="$2"; shift 2 ;;
    --base-name) BASE_NAME="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_build
bench_env
machine="$(machine_line)"
B="$ROOT/build/release"
U="$OUTBOX_PG_URL"
S=hk_bench
PGB="$(ls /usr/lib/postgresql/*/bin/pgbench | tail -1)"
psql -X -q "$U" -c "DROP SCHEMA IF EXISTS $S CASCADE" 2>/dev/null
"$B/tools/outboxctl/outboxctl" --db "$U" --schema "$S" migrate >/dev/null
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

# 1. An idle poll against SELECT 1 (ms per round trip).
claim_sql="SELECT count(*) FROM $S.claim_ordered(500, 'bench', 30000, 10, true, 1000000, 0, 0);"
one="" empty=""
for _ in $(seq 1 "$ROUNDS"); do
  one+=" $("$PGB" -n -M prepared -c 1 -j 1 -T 5 -f <(echo 'SELECT 1;') "$U" | awk '/^latency average/ {print $4}')"
  empty+=" $("$PGB" -n -M prepared -c 1 -j 1 -T 5 -f <(echo "$claim_sql") "$U" | awk '/^latency average/ {print $4}')"
done
one_us="$(echo "$one" | median | awk '{printf "%.0f", $1 * 1000}')"
empty_us="$(echo "$empty" | median | awk '{printf "%.0f", $1 * 1000}')"

# 2. The gauges' query on the backlog.
psql -X -q "$U" -c "INSERT INTO $S.outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers)
  SELECT $S.uuid_v7(), 'order', (g % 1000)::text, 'OrderCreated', convert_to(repeat('x', 200), 'UTF8'), '{}'
  FROM generate_series(1, $ROWS) g" -c "VACUUM ANALYZE $S.outbox"
stats_ms=""
for _ in $(seq 1 "$ROUNDS"); do
  stats_ms+=" $(psql -X -At "$U" -c '\timing on' -c "SELECT count(*) FROM $S.stats()" | awk '/^Time:/ {print $2}')"
done
stats_med="$(echo "$stats_ms" | median | awk '{printf "%.0f", $1}')"

# 3. The gauges over SECS seconds of a relay on the backlog, broker unreachable.
sep='?'; case "$U" in *\?*) sep='&' ;; esac
TRACKED="$U${sep}options=-c%20track_functions%3Dall"
relay_row() {  # relay_row NAME BIN
  psql -X -q "$U" -c "SELECT pg_stat_reset()" >/dev/null
  local log; log="$(mktemp)"
  timeout -s TERM "$SECS" "$2" --db "$TRACKED" --bootstrap 127.0.0.1:1 \
    --set database.schema="$S" --set http.listen=127.0.0.1:0 >"$log" 2>&1 || true
  rm -f "$log"
  sleep 2  # the relays' sessions have ended and flushed their counters
  psql -X -At "$U" -c "SELECT '| $1 | ' || calls || ' | ' || round((total_time / 1000)::numeric, 1) || ' s | '
      || round((total_time / greatest(calls, 1))::numeric) || ' ms | ' || round((100 * total_time / ($SECS * 1000))::numeric) || ' % |'
    FROM pg_stat_user_functions WHERE schemaname = '$S' AND funcname = 'stats'"
}
rows=""
[ -z "$BASE_RELAY" ] || rows+="$(relay_row "$BASE_NAME" "$BASE_RELAY")"$'\n'
rows+="$(relay_row "this commit" "$B/tools/outbox_relay/outbox-relay")"
psql -X -q "$U" -c "DROP SCHEMA $S CASCADE" 2>/dev/null

update_section housekeeping_cost <<MD
### What a relay costs the database between events: idle polls and the gauges' query

Command: \`bench/run_housekeeping_cost.sh --rows $ROWS --seconds $SECS --rounds $ROUNDS${BASE_RELAY:+ --base-relay BIN --base-name $BASE_NAME}\`
$machine

An idle relay's poll is one empty claim (\`claim_ordered()\` on an empty outbox), as a
round trip from pgbench with one client, beside \`SELECT 1\` (5 s each, $ROUNDS alternating
rounds, medians):

| statement | µs per round trip |
|---|---|
| \`SELECT 1\` | $one_us |
| an empty claim | $empty_us |

The gauges' query, \`stats()\`, counts every unsent row: with $ROWS PENDING rows
(1,000 aggregates, 200-byte payloads, after \`VACUUM ANALYZE\`) it took **$stats_med ms**
(median of $ROUNDS calls from psql).

What the gauges cost a database over $SECS s of one relay on that backlog, the broker
unreachable so the rows stay (\`outbox-relay --bootstrap 127.0.0.1:1\`, defaults,
\`relay.stats_interval_ms\` 2000); calls and time of \`stats()\` from
\`pg_stat_user_functions\`:

| relay | \`stats()\` calls | database time in them | per call | share of one core |
|---|---|---|---|---|
$rows
MD
echo "idle poll: SELECT 1 $one_us us, empty claim $empty_us us; stats() $stats_med ms"
echo "$rows"
