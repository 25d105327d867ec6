#!/usr/bin/env bash
# The relay's drain and latency, this commit against an earlier one, measured
# side by side in one run: each round runs relay_bench (one run of every drain
# method, then the latency pass) for this commit and for the base commit, in
# alternating order; the figures are the medians over the rounds. Writes the
# "relay" section of docs/benchmarks.md.
#   bench/run_relay_ab.sh [--base COMMIT] [--rounds 3] [--rows 100000] [--seconds 10]
#                         [--section relay]   (the docs/benchmarks.md section it writes)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BASE=c454320 ROUNDS=3 ROWS=100000 SECS=10 SECTION=relay
while [ $# -gt 0 ]; do
  case "$1" in
    --base) BASE="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --rows) ROWS="$2"; shift 2 ;;
    --seconds) SECS="$2"; shift 2 ;;
    --section) SECTION="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bench_build
BASE_SHA="$(git -C "$ROOT" rev-parse --short "$BASE")"
BASE_DIR="$ROOT/build/ab-$BASE_SHA"
if [ ! -d "$BASE_DIR/src" ]; then
  rm -rf "$BASE_DIR"
  git -C "$ROOT" worktree add -f --detach "$BASE_DIR/src" "$BASE" >/dev/null
fi
(cd "$BASE_DIR/src" && cmake --preset release >/dev/null &&
  cmake --build --preset release -j"$(nproc)" --target relay_bench outbox-relay outbox-mock-kafka >/dev/null)
bench_env
machine="$(machine_line)"
RAW="$(mktemp)"
run() {  # run LABEL BUILD_DIR
  local b="$2/build/release"
  "$b/bench/relay_bench" --relay "$b/tools/outbox_relay/outbox-relay" \
    --mock "$b/tools/mock_kafka/outbox-mock-kafka" --rows "$ROWS" --runs 1 --seconds "$SECS" \
    2>&1 | grep -E '^run 1:|^\| [0-9]|peak RSS' | sed "s/^/$1 /" >>"$RAW"
}
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then run new "$ROOT"; run base "$BASE_DIR/src"; else run base "$BASE_DIR/src"; run new "$ROOT"; fi
done
table="$(awk '
  function median(s,   n, a, i, j, t) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  $2 == "run" { who = $1; line = $0; sub(/^[a-z]+ run 1: /, "", line); rate = line; sub(/ events\/s$/, "", rate); sub(/.* /, "", rate)
    name = line; sub(/ +[0-9]+ events\/s$/, "", name); if (!(name in seen)) { seen[name] = 1; order[++n] = name }
    v[who, name] = v[who, name] " " rate }
  $2 == "|" { who = $1; split($0, f, "|"); p50[who] = p50[who] " " f[4] + 0; p99[who] = p99[who] " " f[5] + 0; load[who] = load[who] " " f[2] + 0 }
  END {
    print "| drain method | this commit, median events/s | base, median events/s | this / base |"
    print "|---|---|---|---|"
    for (i = 1; i <= n; i++) { a = median(v["new", order[i]]); b = median(v["base", order[i]]); printf "| %s | %.0f (%s) | %.0f (%s) | %.2f |\n", order[i], a, v["new", order[i]], b, v["base", order[i]], a / b }
    print ""
    print "| latency, enqueue → marked SENT | this commit | base | this / base |"
    print "|---|---|---|---|"
    printf "| offered load, events/s | %.0f | %.0f | |\n", median(load["new"]), median(load["base"])
    printf "| p50, ms | %.2f | %.2f | %.2f |\n", median(p50["new"]), median(p50["base"]), median(p50["new"]) / median(p50["base"])
    printf "| p99, ms | %.2f | %.2f | %.2f |\n", median(p99["new"]), median(p99["base"]), median(p99["new"]) / median(p99["base"])
  }' "$RAW")"
rss="$(grep '^new Relay peak RSS' "$RAW" | head -1 | sed 's/^new //')"
rm -f "$RAW"

update_section "$SECTION" <<MD
### Relay: drain, memory, latency (this commit against $BASE_SHA, side by side)

Command: \`bench/run_relay_ab.sh --base $BASE --rounds $ROUNDS --rows $ROWS --seconds $SECS --section $SECTION\`
(per round, \`build/release/bench/relay_bench --rows $ROWS --runs 1 --seconds $SECS\` of this
commit and of the base commit, built in \`build/ab-$BASE_SHA\`, in alternating order; each
starts the release \`outbox-relay\` with its defaults — 4 workers, batch 500 — and a private
\`outbox-mock-kafka\` with 3 brokers and a 32-partition topic). Medians of $ROUNDS rounds, each
round's figures in parentheses.
$machine

$table

$rss (this commit, first round).

How to read it: a drain is timed from starting the relay process until no row is unsent;
the floor and the ceiling do not talk to a broker. Latency is enqueue (\`created_at\`,
database clock) → the row marked SENT (\`sent_at\`), an upper bound of commit → ack, at 5,000
events/s offered by one producer (25 events per transaction every 5 ms). Everything —
PostgreSQL, the relay, the mock broker and the load generator — shares the same 2 cores,
and the ceiling's spread shows how noisy the machine is.
MD
echo "updated $DOC" >&2
