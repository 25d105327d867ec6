#!/usr/bin/env bash
# README snippets are files the test command compiles, shown verbatim. This checks that
# every examples/readme/*.cc appears byte for byte as a ```cpp block of README.md; given
# the built examples and outbox-relay, it also runs them on the test environment
# (OUTBOX_PG_URL, OUTBOX_KAFKA_BOOTSTRAP): the producer commits an order and its event,
# the relay publishes it, the consumer applies it once.
#   tests/readme_snippets_test.sh                                      compare only
#   tests/readme_snippets_test.sh PRODUCER CONSUMER RELAY              compare, then run
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ $# -ne 0 ] && [ $# -ne 3 ]; then
  echo "usage: $0 [PRODUCER CONSUMER RELAY]" >&2
  exit 2
fi
tmp="$(mktemp -d /tmp/outbox-readme.XXXXXX)"
relay_pid=""
cleanup() {
  if [ -n "$relay_pid" ]; then kill "$relay_pid" 2>/dev/null || true; wait "$relay_pid" || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# Each block between a line "```cpp" and the next line "```" (unindented: the
# tour's indented snippets are illustrations, not files) into its own file.
awk -v dir="$tmp" '
  open && $0 == "```" { open = 0; close(out); next }
  open { print > out; next }
  $0 == "```cpp" { open = 1; out = sprintf("%s/block.%03d", dir, ++n); printf "" > out }
' "$ROOT/README.md"
shopt -s nullglob
sources=("$ROOT"/examples/readme/*.cc)
blocks=("$tmp"/block.*)
[ ${#sources[@]} -gt 0 ] || { echo "no examples/readme/*.cc" >&2; exit 1; }
bad=0
for src in "${sources[@]}"; do
  found=0
  for b in ${blocks[@]+"${blocks[@]}"}; do
    if cmp -s "$src" "$b"; then found=1; break; fi
  done
  [ "$found" = 1 ] && continue
  bad=1
  echo "examples/readme/$(basename "$src") does not appear verbatim in a \`\`\`cpp block of README.md" >&2
  # The block that starts like the file is most likely its stale copy: show how it differs.
  for b in ${blocks[@]+"${blocks[@]}"}; do
    if [ "$(head -n 1 "$b")" = "$(head -n 1 "$src")" ]; then
      diff -u --label "README.md block" --label "examples/readme/$(basename "$src")" "$b" "$src" >&2 || true
      break
    fi
  done
done
[ "$bad" = 0 ] || exit 1
echo "readme snippets match"
[ $# -eq 3 ] || exit 0

producer="$1" consumer="$2" relay="$3"
for v in OUTBOX_PG_URL OUTBOX_KAFKA_BOOTSTRAP; do
  # A missing environment is a failure, never a skip (docs/testing.md).
  [ -n "${!v:-}" ] || { echo "$v is not set: run inside the test environment (scripts/testenv)" >&2; exit 1; }
done
show() { echo "--- $1:"; cat "$tmp/$1"; }
if ! "$producer" >"$tmp/producer.log" 2>&1; then
  echo "readme_producer failed" >&2; show producer.log >&2; exit 1
fi
# The relay of the producer's outbox schema (`readme`), on a free HTTP port: it moves the
# committed event to the topic the consumer reads.
"$relay" --db "$OUTBOX_PG_URL" --bootstrap "$OUTBOX_KAFKA_BOOTSTRAP" \
  --set database.schema=readme --set http.listen=127.0.0.1:0 >"$tmp/relay.log" 2>&1 &
relay_pid=$!
if ! "$consumer" >"$tmp/consumer.log" 2>&1; then
  echo "readme_consumer failed" >&2; show producer.log >&2; show consumer.log >&2; show relay.log >&2
  exit 1
fi
show producer.log
show consumer.log
echo "readme examples ran"
