#!/usr/bin/env bash
# Issue 42, step 4: outbox-relay draining a log-layout schema beside the same
# relay on today's row store (both sent modes), the store-only claim + mark
# and a bare DELETE, in one run (bench/relay_bench.cc --log 1). Writes the
# "log_relay_drain" section of docs/benchmarks.md. Uses $OUTBOX_PG_URL if set,
# else starts its own servers.
#   bench/run_log_relay_drain.sh [--rows 100000] [--runs 3]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROWS=100000 RUNS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_build relay_bench outbox-relay outbox-mock-kafka
bench_env
B="$ROOT/build/release"
machine="$(machine_line)"
# The latency part of relay_bench is today's store's (the log keeps no send
# time per event): kept short, and left out of this section.
out="$("$B/bench/relay_bench" --relay "$B/tools/outbox_relay/outbox-relay" \
  --mock "$B/tools/mock_kafka/outbox-mock-kafka" --rows "$ROWS" --runs "$RUNS" --log 1 \
  --rate 500 --seconds 2)"
drain="$(printf '%s\n' "$out" | sed -n '/^#### Drain/,/^#### Latency/p' | sed '$d')"

update_section log_relay_drain <<MD
### outbox-relay on the log layout against the row store (issue 42, step 4)

Command: \`bench/run_log_relay_drain.sh --rows $ROWS --runs $RUNS\` (runs
\`build/release/bench/relay_bench --log 1\`: the release \`outbox-relay\`, 4 workers, batch
500, to a private \`outbox-mock-kafka\`; each method over $ROWS pre-filled events of 1,000
aggregates, 200-byte payloads, in the same order every run; the log schema filled through
\`enqueue()\`, 10 events a transaction, the row store's by INSERT; fills are not timed).
$machine

$drain
MD
printf '%s\n' "$drain"
