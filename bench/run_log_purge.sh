#!/usr/bin/env bash
# Issue 42, the purge goal on the built stores: N delivered events, then
# `outboxctl purge --retention-s 0`; the schema's size on disk 5 s after the
# purge started, against its peak, for today's row store and the log layout
# side by side, each run in alternating order. Writes the "log_purge" section
# of docs/benchmarks.md. Uses $OUTBOX_PG_URL and $OUTBOX_KAFKA_BOOTSTRAP if set,
# else starts its own servers.
#   bench/run_log_purge.sh [--rows 200000] [--runs 3]
set -euo pipefail
shopt -s inherit_errexit  # a failing step inside $(run_one …) stops the script
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROWS=200000 RUNS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_build outbox-relay outboxctl outbox-mock-kafka
bench_env
B="$ROOT/build/release"
machine="$(machine_line)"  # before running: the commit that was built
sql() { PGOPTIONS='-c client_min_messages=warning' psql "$OUTBOX_PG_URL" -v ON_ERROR_STOP=1 -Atqc "$1"; }
# The schema's relations on disk (tables, partitions, indexes, TOAST), in bytes.
size_of() {
  sql "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c
       JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = '$1' AND c.relkind IN ('r', 'm')"
}

# One run: a fresh schema of the layout, ROWS events enqueued by enqueue()
# (1,000 aggregates, 200-byte payloads, 20,000 a transaction), delivered by
# one outbox-relay to the environment's broker, then purged. Prints
# "peak_bytes bytes_5s_after purge_ms bytes_once_it_ended".
run_one() {
  local layout="$1" schema="bench_purge_$1" done=0 chunk=20000
  sql "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null
  "$B/tools/outboxctl/outboxctl" --db "$OUTBOX_PG_URL" --schema "$schema" migrate --layout "$layout" >/dev/null
  while [ "$done" -lt "$ROWS" ]; do
    sql "SELECT count(*) FROM generate_series($done + 1, least($done + $chunk, $ROWS)) g,
         LATERAL $schema.enqueue('order', 'a' || (g % 1000), 'OrderChanged',
                                 convert_to(repeat('x', 200), 'UTF8'))" >/dev/null
    done=$((done + chunk))
  done
  "$B/tools/outbox_relay/outbox-relay" --db "$OUTBOX_PG_URL" --bootstrap "$OUTBOX_KAFKA_BOOTSTRAP" \
    --set "database.schema=$schema" --set http.listen=127.0.0.1:0 --set log.level=warn \
    >/tmp/outbox-bench-purge-relay.log 2>&1 &
  local relay=$! deadline=$((SECONDS + 600))
  until [ "$(sql "SELECT count(*) FROM $schema.outbox WHERE status <> 'SENT'")" = 0 ]; do
    if ! kill -0 "$relay" 2>/dev/null || [ $SECONDS -gt $deadline ]; then
      kill -TERM "$relay" 2>/dev/null || true
      echo "run_log_purge: the relay did not deliver every event; its log:" >&2
      tail -20 /tmp/outbox-bench-purge-relay.log >&2
      return 1
    fi
    sleep 1
  done
  kill -TERM "$relay"; wait "$relay" || true
  sql "CHECKPOINT" >/dev/null
  local peak after purge took
  peak="$(size_of "$schema")"
  took="$(mktemp)"
  (
    t0=$(date +%s%N)
    "$B/tools/outboxctl/outboxctl" --db "$OUTBOX_PG_URL" --schema "$schema" purge --retention-s 0 \
      >/dev/null
    echo $((($(date +%s%N) - t0) / 1000000)) >"$took"
  ) &
  purge=$!
  sleep 5
  after="$(size_of "$schema")"
  wait "$purge"
  local ended
  ended="$(size_of "$schema")"
  sql "DROP SCHEMA $schema CASCADE" >/dev/null
  echo "$peak $after $(cat "$took") $ended"
  rm -f "$took"
}

declare -A results
for run in $(seq 1 "$RUNS"); do
  order="rows log"
  [ $((run % 2)) = 0 ] && order="log rows"
  for layout in $order; do
    results[$layout]+="$(run_one "$layout")"$'\n'
  done
done

# The median run (by the share left on disk) of each layout, and every run.
row_of() {
  printf '%s' "${results[$2]}" | awk -v name="$1" -v runs="$RUNS" 'NF == 4 {
      n++; peak[n] = $1; after[n] = $2; ms[n] = $3; ended[n] = $4; share[n] = 100 * $2 / $1 }
    END {
      if (n != runs) { print "run_log_purge: " n " of " runs " runs of " name > "/dev/stderr"; exit 1 }
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (share[j] < share[i]) {
        t = share[i]; share[i] = share[j]; share[j] = t; t = peak[i]; peak[i] = peak[j]; peak[j] = t
        t = after[i]; after[i] = after[j]; after[j] = t; t = ms[i]; ms[i] = ms[j]; ms[j] = t
        t = ended[i]; ended[i] = ended[j]; ended[j] = t }
      m = int((n + 1) / 2); all = ""
      for (i = 1; i <= n; i++) all = all sprintf("%s%.1f %%", i > 1 ? ", " : "", share[i])
      printf "| %s | %.1f | %.1f | %.1f %% | %.2f | %.1f | %s |\n", name, peak[m] / 1048576,
        after[m] / 1048576, share[m], ms[m] / 1000, ended[m] / 1048576, all }'
}
table="$(
  echo "| store | peak MB | MB 5 s after the purge started | % of the peak | purge took s | MB once the purge ended | % of the peak, every run |"
  echo "|---|---|---|---|---|---|---|"
  row_of "today's row store: DELETE of SENT rows" rows
  row_of "the log layout: rotation, then TRUNCATE" log
)"

update_section log_purge <<MD
### Purge of $ROWS delivered events on the built stores: the disk given back (issue 42)

Command: \`bench/run_log_purge.sh --rows $ROWS --runs $RUNS\`. For each store, in alternating
order run by run: a fresh schema (\`outboxctl migrate --layout rows|log\`), $ROWS events
written by \`enqueue()\` (1,000 aggregates, 200-byte payloads, 20,000 a transaction),
delivered by one \`outbox-relay\` (defaults) to the environment's \`outbox-mock-kafka\`, a
\`CHECKPOINT\`; then \`outboxctl purge --retention-s 0\`, and 5 s after it started the schema's
size on disk (every table, partition, index and TOAST table: \`pg_total_relation_size\`)
against its size before, and again once the purge ended (today's purge may still run at 5 s).
Medians of $RUNS runs (by the share left at 5 s); every run's share in the last column.
$machine

$table

Today's purge deletes the rows, and PostgreSQL keeps the files their size until a
\`VACUUM FULL\` (which locks out producers). The log's purge moves the current partition
on (a retention of 0 s makes the move due at once), then truncates the partition every
slot has passed: its files go back to the operating system at once, and producers, who
write into the new current partition, are not locked out.
MD
echo "$table"
