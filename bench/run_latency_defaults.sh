#!/usr/bin/env bash
# Reproduces "Latency with the defaults" in docs/benchmarks.md: enqueue → marked
# SENT at 100, 1,000 and 5,000 events/s offered, the relay with its defaults,
# beside two alternatives a user can switch on: producers with
# outbox.notify = on, and relay.source = cdc; and the defaults, and the old
# relay.poll_max_ms (250), with the measured load after --idle seconds of no
# load (the first events meet a backed-off poll). Rounds interleave the variants;
# medians of the rounds. One relay_bench per (rate, variant, round), no drain.
# Each first runs the same load for --warmup seconds straight after the relay
# started, reported apart (a new process's first claims and produces are
# slower); the measured load follows at once.
#   bench/run_latency_defaults.sh [--rounds 3] [--seconds 10] [--rates "100 1000 5000"]
#                                 [--warmup 2] [--idle 2]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROUNDS=3 SECS=10 RATES="100 1000 5000" WARMUP=2 IDLE=2
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --seconds) SECS="$2"; shift 2 ;;
    --rates) RATES="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --idle) IDLE="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_build
bench_env
B="$ROOT/build/release"
machine="$(machine_line)"
RAW="$(mktemp)"
one() {  # rate variant
  local extra=()
  case "$2" in
    notify) extra=(--producer-sql "SET outbox.notify = on") ;;
    cdc) extra=(--relay-set "relay.source=cdc") ;;
    idle) extra=(--idle "$IDLE") ;;
    idle250) extra=(--idle "$IDLE" --relay-set "relay.poll_max_ms=250") ;;
  esac
  "$B/bench/relay_bench" --relay "$B/tools/outbox_relay/outbox-relay" \
    --mock "$B/tools/mock_kafka/outbox-mock-kafka" --rows 0 --seconds "$SECS" --rate "$1" --warmup "$WARMUP" \
    "${extra[@]}" | grep -E '^\| [0-9.]+ events/s|^\| warm-up|^Claims during|^Idle for' |
    awk -F'|' -v r="$1" -v v="$2" '
      /^Claims/ { split($0, c, "[(/]"); cps = c[2] + 0; next }
      /^Idle for/ { split($0, c, ": "); idle = c[2] + 0; next }
      /^\| warm-up/ { gsub(/ ms| /, "", $5); warm = $5; next }
      { gsub(/ ms| /, "", $4); gsub(/ ms| /, "", $5); split($2, o, " "); off = o[1]; p50 = $4; p99 = $5 }
      END { print r, v, off, p50, p99, cps, (warm == "" ? "-" : warm), (idle == "" ? "-" : idle) }' >>"$RAW"
}
for round in $(seq 1 "$ROUNDS"); do
  for rate in $RATES; do
    for v in defaults idle idle250 notify cdc; do one "$rate" "$v"; done
  done
done
table="$(awk '
  function median(s,   a, n, t, i, j) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  { k = $1 " " $2; off[k] = off[k] " " $3; p50[k] = p50[k] " " $4; p99[k] = p99[k] " " $5; cps[k] = cps[k] " " $6; warm[k] = warm[k] " " $7; idle[k] = idle[k] " " $8; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
  END {
    print "| offered, events/s | defaults: p50 / p99, ms | defaults: relay claims/s (incl. empty) | defaults, the warm-up (first '"$WARMUP"' s after start): p99, ms | defaults, after '"$IDLE"' s idle: p50 / p99 | defaults: idle claims/s | `poll_max_ms = 250` (the old default), after '"$IDLE"' s idle: p50 / p99 | its idle claims/s | producers with `outbox.notify = on`: p50 / p99 | `relay.source = cdc`: p50 / p99 | goal (issue 26, defaults) |"
    print "|---|---|---|---|---|---|---|---|---|---|---|"
    for (i = 1; i <= n; i++) { r = order[i]
      goal = r + 0 <= 100 ? "p50 ≤ 5" : "p99 ≤ 20"
      printf "| %s (offered %.0f) | %.2f / %.2f | %.0f | %.2f | %.2f / %.2f | %.1f | %.2f / %.2f | %.1f | %.2f / %.2f | %.2f / %.2f | %s |\n", r, median(off[r " defaults"]),
        median(p50[r " defaults"]), median(p99[r " defaults"]), median(cps[r " defaults"]), median(warm[r " defaults"]),
        median(p50[r " idle"]), median(p99[r " idle"]), median(idle[r " idle"]), median(p50[r " idle250"]), median(p99[r " idle250"]), median(idle[r " idle250"]),
        median(p50[r " notify"]), median(p99[r " notify"]),
        median(p50[r " cdc"]), median(p99[r " cdc"]), goal }
  }' "$RAW")"
rm -f "$RAW"
update_section latency_defaults <<MD
### Latency with the defaults (issue 26)

Command: \`bench/run_latency_defaults.sh --rounds $ROUNDS --seconds $SECS --rates "$RATES" --warmup $WARMUP --idle $IDLE\`
(per rate, variant and round, \`build/release/bench/relay_bench --rows 0 --rate R --seconds $SECS --warmup $WARMUP\`:
the release \`outbox-relay\` with its defaults — 4 workers, batch 500, idle poll every 2 ms
for 20 ms after work was found, then doubling to 20 ms, \`linger.ms\` 0, no notifications —
and a private \`outbox-mock-kafka\`; one producer commits
\`EnqueueBatch\` transactions every 5 ms, or one event every 1000/R ms below 200 events/s).
$machine

Latency is enqueue (\`created_at\`) → marked SENT (\`sent_at\`), database clock, over every
event of the measured load; medians of $ROUNDS rounds. Each run first offers the same load for
$WARMUP s straight after the relay started (a new process's first claims and produces are
slower: plans, connections, the broker's metadata); its events are counted apart, in the
warm-up column, and the measured load follows at once. The "after $IDLE s idle" columns
(\`relay_bench --idle $IDLE\`) wait that long with no load between the warm-up and the
measured load, and count the relay's claims meanwhile (\`outbox_relay_claims_total\` +
\`outbox_relay_empty_claims_total\`): the measured load's first events meet a poll that
has backed off to \`relay.poll_max_ms\`.

$table
MD
echo "$table"
