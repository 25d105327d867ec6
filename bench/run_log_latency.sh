#!/usr/bin/env bash
# Issue 42: outbox-relay's latency on the log layout beside the row store, with
# every default, at 100, 1,000 and 5,000 events/s offered. One relay_bench per
# (rate, layout, round), no drain, rounds interleaving the layouts; medians of
# the rounds. The log keeps no send time per event, so both layouts are
# measured by the relay's own histogram outbox_relay_commit_to_ack_seconds
# (enqueue → broker ack: the event's age at claim on the database's clock plus
# claim → ack on the relay's), quantiles interpolated inside its buckets (1,
# 2.5, 5, 10, 20 ms ...), and the share acked within 20 ms, which is exact; the
# row store's enqueue → marked SENT (database clock) is printed beside it.
# Writes the "log_latency" section of docs/benchmarks.md.
# --base-relay PATH adds a third variant, the log under another outbox-relay binary
# (a build of an earlier commit), run in the same rounds; a second table sets it
# beside this build's log figures.
#   bench/run_log_latency.sh [--rounds 3] [--seconds 10] [--rates "100 1000 5000"] [--warmup 2]
#                            [--base-relay PATH --base-name TEXT]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROUNDS=3 SECS=10 RATES="100 1000 5000" WARMUP=2 BASE="" BASE_NAME="base"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --seconds) SECS="$2"; shift 2 ;;
    --rates) RATES="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --base-relay) BASE="$2"; shift 2 ;;
    --base-name) BASE_NAME="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_build relay_bench outbox-relay outbox-mock-kafka
bench_env
B="$ROOT/build/release"
machine="$(machine_line)"
RAW="$(mktemp)"
one() {  # rate layout [relay]
  "$B/bench/relay_bench" --relay "${3:-$B/tools/outbox_relay/outbox-relay}" \
    --mock "$B/tools/mock_kafka/outbox-mock-kafka" --rows 0 --seconds "$SECS" --rate "$1" \
    --warmup "$WARMUP" --layout "${2%-base}" | grep -E '^\| [0-9.]+ events/s|^Relay histogram' |
    awk -v r="$1" -v l="$2" '
      /^Relay histogram/ { split($0, a, "≈ "); h50 = a[2] + 0; h99 = a[3] + 0
                           split($0, b, ", "); w = b[4] + 0; next }
      { gsub(/ ms| /, "", $4); gsub(/ ms| /, "", $5); s50 = $4; s99 = $5 }
      END { print r, l, h50, h99, w, (s50 == "-" || s50 == "" ? "-" : s50), (s99 == "-" || s99 == "" ? "-" : s99) }' FS='|' >>"$RAW"
}
for round in $(seq 1 "$ROUNDS"); do
  for rate in $RATES; do
    # The base binary runs before this build's log in odd rounds and after it in even
    # ones, so that neither always comes last.
    if [ -n "$BASE" ] && [ $((round % 2)) -eq 1 ]; then one "$rate" log-base "$BASE"; fi
    for layout in rows log; do one "$rate" "$layout"; done
    if [ -n "$BASE" ] && [ $((round % 2)) -eq 0 ]; then one "$rate" log-base "$BASE"; fi
  done
done
table="$(awk '
  function median(s,   a, n, t, i, j) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  { k = $1 " " $2; h50[k] = h50[k] " " $3; h99[k] = h99[k] " " $4; w[k] = w[k] " " $5; all99[k] = all99[k] (all99[k] == "" ? "" : ", ") $4
    s50[k] = s50[k] " " $6; s99[k] = s99[k] " " $7; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
  END {
    print "| offered, events/s | rows: histogram p50 / p99, ms | rows: within 20 ms | rows: enqueue → marked SENT p50 / p99, ms | log: histogram p50 / p99, ms | log: p99 per round | log: within 20 ms | goal (issue 42) |"
    print "|---|---|---|---|---|---|---|---|"
    for (i = 1; i <= n; i++) { r = order[i]
      goal = r + 0 <= 100 ? "p50 ≤ 1.5 (polling)" : "p99 ≤ 20"
      printf "| %s | %.2f / %.2f | %.2f %% | %.2f / %.2f | %.2f / %.2f | %s | %.2f %% | %s |\n", r,
        median(h50[r " rows"]), median(h99[r " rows"]), median(w[r " rows"]), median(s50[r " rows"]), median(s99[r " rows"]),
        median(h50[r " log"]), median(h99[r " log"]), all99[r " log"], median(w[r " log"]), goal }
  }' "$RAW")"
base_table=""
if [ -n "$BASE" ]; then
  base_table="$(awk -v name="$BASE_NAME" '
    function median(s,   a, n, t, i, j) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    $2 != "rows" { k = $1 " " $2; h50[k] = h50[k] " " $3; h99[k] = h99[k] " " $4; w[k] = w[k] " " $5
      all99[k] = all99[k] (all99[k] == "" ? "" : ", ") $4; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
    END {
      print "| offered, events/s | log, " name ": p50 / p99, ms | p99 per round | within 20 ms | log, this build: p50 / p99, ms | p99 per round | within 20 ms | p99 this build ÷ " name " |"
      print "|---|---|---|---|---|---|---|---|"
      for (i = 1; i <= n; i++) { r = order[i]; b = r " log-base"; c = r " log"
        printf "| %s | %.2f / %.2f | %s | %.2f %% | %.2f / %.2f | %s | %.2f %% | %.2f |\n", r,
          median(h50[b]), median(h99[b]), all99[b], median(w[b]),
          median(h50[c]), median(h99[c]), all99[c], median(w[c]), (median(h99[b]) > 0 ? median(h99[c]) / median(h99[b]) : 0) }
    }' "$RAW")"
  base_table="
The log under $BASE_NAME's \`outbox-relay\` (\`--base-relay\`), in the same rounds, beside this build's:

$base_table"
fi
rm -f "$RAW"
update_section log_latency <<MD
### outbox-relay's latency on the log layout beside the row store (issue 42)

Command: \`bench/run_log_latency.sh --rounds $ROUNDS --seconds $SECS --rates "$RATES" --warmup $WARMUP\`
(per rate, layout and round, \`build/release/bench/relay_bench --rows 0 --rate R --seconds $SECS
--warmup $WARMUP --layout rows|log\`: the release \`outbox-relay\` with every default — 4 workers,
batch 500, \`database.log_position_every_ms\` 10 — and a private \`outbox-mock-kafka\`; one
producer commits \`EnqueueBatch\` transactions every 5 ms, or one event every 1000/R ms below
200 events/s; the warm-up's events are not counted).
$machine

The log keeps no send time per event, so both layouts are measured by the relay's own
histogram \`outbox_relay_commit_to_ack_seconds\` (enqueue → broker ack: the event's age at
claim on the database's clock plus claim → ack on the relay's), between two scrapes around
the measured load. Its quantiles are interpolated inside the buckets (1, 2.5, 5, 10, 20 ms,
...), so they are estimates as wide as their bucket; "within 20 ms" is exact (a bucket
bound). The row store's enqueue → marked SENT (\`sent_at\`, database clock, after the ack)
is shown beside it. Medians of $ROUNDS rounds.

$table
$base_table
MD
echo "$table"
echo "$base_table"
