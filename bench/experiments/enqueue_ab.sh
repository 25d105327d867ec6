#!/usr/bin/env bash
# The cost of enqueue() to the producer's transaction, two schema versions side
# by side, as issue 26 measured it: pgbench, 4 clients, synchronous_commit off,
# a business INSERT of a ~200-byte row with and without `SELECT S.enqueue(...)`
# (200-byte payload, one header, a random aggregate of 10,000); the cases
# alternate round by round; medians. Each schema is made by its own outboxctl.
# Uses $OUTBOX_PG_URL if set, else starts its own throwaway servers.
#   bench/experiments/enqueue_ab.sh --base-ctl BIN --ctl BIN [--rounds 6] [--seconds 10]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
ROUNDS=6 SECS=10 BASE_CTL="" CTL=""
while [ $# -gt 0 ]; do
  case "$1" in
    --base-ctl) BASE_CTL="$2"; shift 2 ;;
    --ctl) CTL="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --seconds) SECS="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
[ -x "$BASE_CTL" ] && [ -x "$CTL" ] || { echo "--base-ctl and --ctl: outboxctl binaries" >&2; exit 2; }
bench_env
machine_line
PGB="$(ls /usr/lib/postgresql/*/bin/pgbench | tail -1)"
U="$OUTBOX_PG_URL"
psql -X -q "$U" -c "DROP SCHEMA IF EXISTS enq_base CASCADE" -c "DROP SCHEMA IF EXISTS enq_this CASCADE" \
  -c "DROP TABLE IF EXISTS public.enq_business" \
  -c "CREATE TABLE public.enq_business (id bigserial PRIMARY KEY, body text)" >/dev/null 2>&1
"$BASE_CTL" --db "$U" --schema enq_base migrate | tail -1
"$CTL" --db "$U" --schema enq_this migrate | tail -1
script() {  # script CASE: the pgbench script of one case (none: no enqueue)
  echo '\set agg random(1, 10000)'
  echo 'BEGIN;'
  echo "INSERT INTO public.enq_business (body) VALUES (repeat('b', 200));"
  [ "$1" = none ] || echo "SELECT $1.enqueue('order', :agg::text, 'OrderCreated', convert_to(repeat('x', 200), 'UTF8'), '{\"traceparent\":\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}'::jsonb);"
  echo 'COMMIT;'
}
export PGOPTIONS="-c synchronous_commit=off"
raw=""
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 0 ]; then order="enq_this enq_base none"; else order="none enq_base enq_this"; fi
  for s in $order; do
    psql -X -q "$U" -c "TRUNCATE public.enq_business, enq_base.outbox, enq_this.outbox" -c "CHECKPOINT" >/dev/null
    tps="$("$PGB" -n -M prepared -c 4 -j 2 -T "$SECS" -f <(script "$s") "$U" | awk '/^tps/ {print $3; exit}')"
    raw+="$s $tps"$'\n'
  done
done
awk '
  function median(s,   n, a, i, j, t) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  { v[$1] = v[$1] " " $2 }
  END {
    n = median(v["none"]); b = median(v["enq_base"]); t = median(v["enq_this"])
    print "| the transaction | transactions/s (median) | µs added by enqueue |"
    print "|---|---|---|"
    printf "| business INSERT alone | %.0f | — |\n", n
    printf "| + `enqueue(...)`, base schema | %.0f | %.1f |\n", b, 1e6 / b - 1e6 / n
    printf "| + `enqueue(...)`, this schema | %.0f | %.1f |\n", t, 1e6 / t - 1e6 / n
    printf "\nthis / base, added cost: %.2f\n", (1e6 / t - 1e6 / n) / (1e6 / b - 1e6 / n)
  }' <<<"$raw"
psql -X -q "$U" -c "DROP SCHEMA enq_base CASCADE" -c "DROP SCHEMA enq_this CASCADE" -c "DROP TABLE public.enq_business" >/dev/null 2>&1
