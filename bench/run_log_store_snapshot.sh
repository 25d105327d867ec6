#!/usr/bin/env bash
# Issue 42, step 4: the built log store under a steady load, without and with a
# held snapshot, beside today's store, in one run (bench/log_snapshot.cc
# --store 1). Writes the "log_store_snapshot" section of docs/benchmarks.md.
# Uses $OUTBOX_PG_URL if set, else starts its own servers.
#   bench/run_log_store_snapshot.sh [--rate 3000] [--seconds 40]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RATE=3000 SECONDS_=40
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) RATE="$2"; shift 2 ;;
    --seconds) SECONDS_="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_build log_snapshot
bench_env
B="$ROOT/build/release"
machine="$(machine_line)"  # before running: the commit that was built
table="$("$B/bench/log_snapshot" --store 1 --rate "$RATE" --seconds "$SECONDS_")"

update_section log_store_snapshot <<MD
### The built log store under a held snapshot (issue 42, step 4)

Command: \`bench/run_log_store_snapshot.sh --rate $RATE --seconds $SECONDS_\` (runs
\`build/release/bench/log_snapshot --store 1\`: 4 producer sessions offer $RATE events/s, each
event its own transaction, for $SECONDS_ s, while one session drains through the store's
\`Claim\` + \`MarkSent\` (batch 500) and idles as the relay's poller does; each store without,
then with, a REPEATABLE READ transaction holding its snapshot for the whole run. Latency is
enqueue → hand-over (the drainer's clock minus the producer's, carried in the payload); row
writes are the schema's updates + deletes after the inserts, per event).
$machine

$table
MD
echo "$table"
