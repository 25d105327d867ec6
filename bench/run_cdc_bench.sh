#!/usr/bin/env bash
# Reproduces the CDC figures in docs/benchmarks.md: drain of a committed backlog
# by outbox-relay with relay.source = cdc, next to a bare replication stream of
# the same slot (the ceiling) and the polling relay, in one run; the WAL the
# relay writes per event; one large transaction streamed (peak RSS); latency at
# steady loads in both modes.
#   bench/run_cdc_bench.sh [--rows 200000] [--runs 3] [--big-tx 100000] [--rates 1000,5000] [--seconds 15]
#                          [--aggregates 1000]
# The default 1,000 aggregates write the section "cdc"; another count writes
# "cdc_aggregates_<N>" (few aggregates: the hot-key case).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROWS=200000 RUNS=3 BIG=100000 RATES=1000,5000 SECONDS_=15 AGGREGATES=1000
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --big-tx) BIG="$2"; shift 2 ;;
    --rates) RATES="$2"; shift 2 ;;
    --seconds) SECONDS_="$2"; shift 2 ;;
    --aggregates) AGGREGATES="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_build
bench_env
B="$ROOT/build/release"
machine="$(machine_line)"
out="$("$B/bench/cdc_bench" --relay "$B/tools/outbox_relay/outbox-relay" \
  --mock "$B/tools/mock_kafka/outbox-mock-kafka" --rows "$ROWS" --runs "$RUNS" \
  --big-tx "$BIG" --rates "$RATES" --seconds "$SECONDS_" --aggregates "$AGGREGATES")"
section=cdc extra=""
if [ "$AGGREGATES" != 1000 ]; then
  section="cdc_aggregates_$AGGREGATES" extra=" --aggregates $AGGREGATES"
fi

update_section "$section" <<MD
### CDC: drain against the bare stream and polling, WAL per event, one large transaction, latency ($AGGREGATES aggregates)

Command: \`bench/run_cdc_bench.sh --rows $ROWS --runs $RUNS --big-tx $BIG --rates $RATES --seconds $SECONDS_$extra\`
(runs \`build/release/bench/cdc_bench\`: the release \`outbox-relay\` with its defaults —
4 workers, batch 500; in cdc mode one stream thread with batches of up to 2000
(\`cdc.batch_size\`), one published at a time (\`cdc.batches_in_flight\` = 1), plus
the 4 workers as sweepers —
and a private \`outbox-mock-kafka\` with 3 brokers and a 32-partition topic).
$machine

$out

How to read it: each run creates the slot, commits the backlog, then times the bare
stream (it reads the slot without confirming), then \`outbox-relay\` in cdc mode on the
same slot and WAL, then drops the slot, commits the backlog again and times the cdc relay
with \`cdc.batches_in_flight = 4\` (opt-in), then the polling
relay the same way; figures are medians of $RUNS runs. A drain is timed from starting the relay
process until no row is unsent. "Relay WAL per event" is the growth of
\`pg_current_wal_lsn()\` during the drain divided by the events: the relay's own row
writes (the polling claim's PROCESSING update plus the SENT update, against the
stream's one SENT update), with their index and full-page-image costs. "The marks
alone" times just that one write per event (\`MarkSent\` with token 0 over the committed
rows, batches of 2,000, one session): the ceiling for a relay that records every outcome
in the table, as ours must. CPU per 1,000 events is read from \`/proc\` for the relay
process, every PostgreSQL process (walsender, the relay's sessions, background workers)
and the mock broker, over each drain.

Latency: "commit → broker ack" comes from the relay's own histogram
\`outbox_relay_commit_to_ack_seconds\` (scraped from its \`/metrics\` after the load): for
streamed rows the commit's time (pgoutput's commit timestamp, database clock) to the
broker's ack (the relay's clock — one machine here, one clock); for polled rows the row's
age at claim plus claim → ack. p50 and p99 are interpolated inside the histogram's
buckets (…, 2.5, 5, 10, 20 ms, …) as Prometheus' \`histogram_quantile\` does, hence "≈";
"acked within 5 ms" is exact (a bucket bound). "Enqueue → marked SENT" is \`sent_at -
created_at\` on the database clock: from the producer transaction's start to the start
of the mark's transaction — an upper bound that adds the producer's commit and the wait
for the previous batch's mark. The polling relay runs with its defaults (no
\`outbox.notify\`, so it polls every 2–20 ms); the cdc relay with its own; both with
\`linger.ms\` 0. Everything — PostgreSQL, the relay, the mock broker and the load
generator — shares the same two cores (docs/design.md, "CDC", "Measured limits").
MD
echo "updated $DOC" >&2
