#!/usr/bin/env bash
# Reproduces the relay figures in docs/benchmarks.md: drain of a pre-filled
# outbox through outbox-relay to outbox-mock-kafka, next to the store-only floor
# and the database's ceiling in the same run; peak RSS; latency at a steady rate.
#   bench/run_relay_bench.sh [--rows 200000] [--runs 3] [--rate 5000] [--seconds 20]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROWS=200000 RUNS=3 RATE=5000 SECONDS_=20
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --seconds) SECONDS_="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_build
bench_env
B="$ROOT/build/release"
machine="$(machine_line)"
out="$("$B/bench/relay_bench" --relay "$B/tools/outbox_relay/outbox-relay" \
  --mock "$B/tools/mock_kafka/outbox-mock-kafka" --rows "$ROWS" --runs "$RUNS" \
  --rate "$RATE" --seconds "$SECONDS_")"

update_section relay <<MD
### Relay: drain, memory, latency

Command: \`bench/run_relay_bench.sh --rows $ROWS --runs $RUNS --rate $RATE --seconds $SECONDS_\`
(runs \`build/release/bench/relay_bench\`, which starts the release \`outbox-relay\` with its
defaults — 4 workers, batch 500, \`sent_mode=update\` unless stated — and a private
\`outbox-mock-kafka\` with 3 brokers and a 32-partition topic).
$machine

$out

How to read it: the drain is timed from starting the relay process (including its
~first-connection set-up) until no row is unsent; the methods alternate within each run
and the figure is the median of $RUNS runs. The floor and the ceiling do not talk to a
broker. Latency is enqueue (\`created_at\`, database clock) → the row marked SENT
(\`sent_at\`); the broker's ack comes before the mark, so this is an upper bound of
commit → ack. Everything — PostgreSQL, the relay, the mock broker and the load
generator — shares the same 2 cores.
MD
echo "updated $DOC" >&2
