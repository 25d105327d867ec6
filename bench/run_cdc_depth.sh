#!/usr/bin/env bash
# cdc.batches_in_flight 1 against 4, side by side: alternating cdc_bench runs
# (small backlog, latency at steady loads), the stream's depth set for every
# cdc relay of a run. Writes the section "cdc_depth" of docs/benchmarks.md.
#   bench/run_cdc_depth.sh [--rounds 2] [--rows 20000] [--seconds 10]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROUNDS=2 ROWS=20000 SECONDS_=10
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --rows) ROWS="$2"; shift 2 ;;
    --seconds) SECONDS_="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_build
bench_env
B="$ROOT/build/release"
machine="$(machine_line)"
rows=""
for round in $(seq 1 "$ROUNDS"); do
  for depth in 1 4; do
    out="$("$B/bench/cdc_bench" --relay "$B/tools/outbox_relay/outbox-relay" \
      --mock "$B/tools/mock_kafka/outbox-mock-kafka" --rows "$ROWS" --runs 1 --big-tx 1000 \
      --rates 1000,5000 --seconds "$SECONDS_" --cdc-set "cdc.batches_in_flight=$depth")"
    drain="$(grep -oE 'relay cdc +[0-9]+ events/s' <<<"$out" | head -1 | grep -oE '[0-9]+ events/s')"
    for rate in 1000 5000; do
      l="$(grep -E "^latency cdc at $rate/s" <<<"$out" | sed -E 's/.*SENT p50 ([0-9.]+) ms p99 ([0-9.]+) ms.*/\1 | \2/')"
      rows+="| $round | $depth | $drain | $rate | $l |"$'\n'
    done
  done
done

update_section cdc_depth <<MD
### CDC: one batch in flight against four

Command: \`bench/run_cdc_depth.sh --rounds $ROUNDS --rows $ROWS --seconds $SECONDS_\` (alternating
\`cdc_bench --rows $ROWS --runs 1 --big-tx 1000 --rates 1000,5000 --seconds $SECONDS_
--cdc-set cdc.batches_in_flight=N\`: the drain of a committed backlog, then enqueue → SENT
at a steady load, release build, mock broker with 3 brokers and 32 partitions).
$machine

| round | cdc.batches_in_flight | drain | offered events/s | enqueue → SENT p50 ms | p99 ms |
|---|---|---|---|---|---|
$rows
MD
