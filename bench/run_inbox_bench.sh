#!/usr/bin/env bash
# Reproduces the inbox figure in docs/benchmarks.md: effects applied per second
# through the inbox by one consumer from a pre-filled topic.
#   bench/run_inbox_bench.sh [--events 200000] [--runs 3] [--batch 500]
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
  --runs "$RUNS" --batch "$BATCH")"

update_section inbox <<MD
### Inbox: effects per second

Command: \`bench/run_inbox_bench.sh --events $EVENTS --runs $RUNS --batch $BATCH\` (runs
\`build/release/bench/inbox_bench\`: a topic of $EVENTS events with 200-byte payloads on a
private \`outbox-mock-kafka\`, 64 partitions; one consumer in-process; per batch one
transaction: one statement for all stamps, the effects, commit, then the offset commit).
Three handlers with the same effect, taking turns run by run: the per-message \`Handler\`
(one synchronous \`INSERT\` per event), the per-message \`SinkHandler\` (the same
\`INSERT\` queued on a \`StatementSink\`; the batch's statements go in one libpq pipeline
inside its transaction) and a \`BatchHandler\` (one multi-row \`INSERT\` per batch).
$machine

$out

Timed from the first applied effect to the last (the mock's consumer-group join, ~3 s,
is left out); a fresh consumer group and empty tables per run; median of $RUNS runs.
What limits the per-message \`Handler\`: its own round trip per event (one synchronous
\`INSERT\` each, as a typical handler does); the sink handler sends the same statements
without waiting for each; stamps cost one statement per batch.
The replay rows: after each batch-handler run, fresh consumer groups read the whole
topic again (every message already stamped, as after an offset reset or a full
re-publish); one counts each absorbed copy on its stamp (one \`UPDATE\` per batch, the
default, what \`outboxctl trace\` shows), the other has \`count_duplicates = false\`; the
two alternate in order, run by run.
MD
echo "updated $DOC" >&2
