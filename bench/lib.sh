# Shared by the bench scripts: build, environment, machine description, and
# replacing one marked section of docs/benchmarks.md.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DOC="$ROOT/docs/benchmarks.md"

# bench_build [TARGET...]: the packages, then the release build (only TARGETs when given).
bench_build() {
  "$ROOT/scripts/deps"
  cmake --preset release >/dev/null
  if [ $# -gt 0 ]; then
    cmake --build --preset release -j"$(nproc)" --target "$@" >/dev/null
  else
    cmake --build --preset release -j"$(nproc)" >/dev/null
  fi
}

# Starts a throwaway testenv unless OUTBOX_PG_URL is already set; exports its env.
bench_env() {
  if [ -z "${OUTBOX_PG_URL:-}" ]; then
    BENCH_ENVDIR="$(mktemp -d /tmp/outbox-bench.XXXXXX)"
    trap '"$ROOT/scripts/testenv" stop "$BENCH_ENVDIR"; rm -rf "$BENCH_ENVDIR"' EXIT
    OUTBOX_MOCK_KAFKA="$ROOT/build/release/tools/mock_kafka/outbox-mock-kafka" \
      "$ROOT/scripts/testenv" start "$BENCH_ENVDIR" >/dev/null
    set -a; source "$BENCH_ENVDIR/env"; set +a
  fi
}

# The testenv's RabbitMQ node (scripts/testenv writes OUTBOX_AMQP_URL), or exit 2.
require_amqp() {
  [ -n "${OUTBOX_AMQP_URL:-}" ] || { echo "OUTBOX_AMQP_URL is not set (scripts/testenv writes it)" >&2; exit 2; }
}

# What the RabbitMQ benchmarks start with: the release build, a testenv (or the
# one in the environment) with its RabbitMQ node; sets B (the release build
# directory) and machine (machine_line).
rabbitmq_bench_setup() {
  bench_build
  bench_env
  require_amqp
  B="$ROOT/build/release"
  machine="$(machine_line)"
}

machine_line() {
  local cpu pg
  cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  pg="$(psql "$OUTBOX_PG_URL" -Atc 'show server_version' 2>/dev/null || echo '?')"
  echo "Machine: $(nproc) cores ($cpu), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, PostgreSQL $pg on the same machine, $(date -u +%Y-%m-%d), commit $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet -- . ':!docs' || echo '+uncommitted code changes')."
}

# update_section NAME < content: replaces the text between
# <!-- BEGIN NAME --> and <!-- END NAME --> in docs/benchmarks.md (appends if absent).
update_section() {
  local name="$1" content tmp
  content="$(cat)"
  mkdir -p "$(dirname "$DOC")"
  [ -f "$DOC" ] || printf '# Benchmarks\n' >"$DOC"
  tmp="$(mktemp)"
  if grep -q "<!-- BEGIN $name -->" "$DOC"; then
    awk -v name="$name" -v content="$content" '
      $0 == "<!-- BEGIN " name " -->" { print; print content; skip = 1; next }
      $0 == "<!-- END " name " -->" { skip = 0 }
      !skip { print }' "$DOC" >"$tmp"
  else
    { cat "$DOC"; printf '\n<!-- BEGIN %s -->\n%s\n<!-- END %s -->\n' "$name" "$content" "$name"; } >"$tmp"
  fi
  mv "$tmp" "$DOC"
}

# log_drain_run STORE [--rows 100000] [--runs 3] [--batch 500]: what the scripts
# of bench/log_drain.cc's modes share — their flags, the release build, a
# testenv, the machine line (before running: the commit that was built), then
# `log_drain --store STORE`. Sets ROWS, RUNS, BATCH, B, machine and table.
log_drain_run() {
  local store="$1"
  shift
  ROWS=100000 RUNS=3 BATCH=500
  while [ $# -gt 0 ]; do
    case "$1" in
      --rows) ROWS="$2"; shift 2 ;;
      --runs) RUNS="$2"; shift 2 ;;
      --batch) BATCH="$2"; shift 2 ;;
      *) echo "unknown flag $1" >&2; exit 2 ;;
    esac
  done
  bench_build log_drain outbox-mock-kafka
  bench_env
  B="$ROOT/build/release"
  machine="$(machine_line)"
  table="$("$B/bench/log_drain" --store "$store" --mock "$B/tools/mock_kafka/outbox-mock-kafka" \
    --rows "$ROWS" --runs "$RUNS" --batch "$BATCH")"
}
