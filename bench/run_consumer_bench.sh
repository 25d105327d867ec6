#!/usr/bin/env bash
# Reproduces the outbox-consumer figure in docs/benchmarks.md: effects per second
# of the daemon with a one-statement `sql` handler against the C++ SinkHandler
# doing the same INSERT in-process, taking turns in one run.
#   bench/run_consumer_bench.sh [--events 200000] [--runs 3] [--batch 500]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
EVENTS=200000 RUNS=3 BATCH=500
while [ $# -gt 0 ]; do
  case "$1" in
    --events) EVENTS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_build
bench_env
B="$ROOT/build/release"
machine="$(machine_line)"
out="$("$B/bench/inbox_bench" --mock "$B/tools/mock_kafka/outbox-mock-kafka" --events "$EVENTS" \
  --runs "$RUNS" --batch "$BATCH" --daemon "$B/tools/outbox_consumer/outbox-consumer")"

update_section consumer <<MD
### outbox-consumer against the C++ SinkHandler: effects per second

Command: \`bench/run_consumer_bench.sh --events $EVENTS --runs $RUNS --batch $BATCH\` (runs
\`build/release/bench/inbox_bench --daemon build/release/tools/outbox_consumer/outbox-consumer\`:
a topic of $EVENTS events with 200-byte payloads on a private \`outbox-mock-kafka\`, 64
partitions). Two consumers of the same effect — one \`INSERT\` of the message key per
event, queued in the inbox's transaction, batches of $BATCH — taking turns run by run (the
order flips each round): the C++ \`SinkHandler\` in the benchmark's process, and the
release \`outbox-consumer\` as its own process with \`sql = "INSERT ... VALUES (\$4, 1)"\`
(which also builds \$1 … \$3 for every event: the payload as hex, the headers as JSON).
$machine

$out

The in-process consumer is timed from its first applied effect to the last; the daemon
from the first effect row the benchmark sees to the last (polled every 50 ms). Both
leave out the mock's consumer-group join (~3 s). A fresh consumer group and empty
tables per run; median of $RUNS runs. Issue 27's goal: at least 0.8×.
MD
echo "updated $DOC" >&2
