#!/usr/bin/env bash
# The batch lease in the relay (issue 26's drain goal): this commit with
# batch_lease_prototype.patch applied, against this commit, side by side.
# The patch keeps claim_ordered()'s search (heads, runs, window) and changes
# what the claim writes: one lease row per batch (token, owner, expiry, seqs)
# instead of every row's lease; the mark to SENT (or the delete) takes the
# seqs out of their token's lease and writes each row once. Only the drain's
# path is adapted: retries, failures, the change stream's token-0 marks,
# outboxctl and the gauges are not; its mark no longer accepts a row already
# SENT (a retried mark whose reply was lost) nor records claimed_at; so it is
# a measurement, not a relay to run.
# Builds the patched tree in build/batch-lease/src, then runs its
# bench/run_relay_ab.sh with this commit as the base, and prints the section.
#   bench/experiments/batch_lease_ab.sh [--rounds 4] [--rows 100000] [--seconds 3]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
ROUNDS=4 ROWS=100000 SECS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --rows) ROWS="$2"; shift 2 ;;
    --seconds) SECS="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
HEAD_SHA="$(git -C "$ROOT" rev-parse --short HEAD)"
DIR="$ROOT/build/batch-lease/src"
PATCH="$ROOT/bench/experiments/batch_lease_prototype.patch"
# Reuse the patched tree only if it is this commit with the patch applied.
if [ -d "$DIR" ] && { [ "$(git -C "$DIR" rev-parse --short HEAD)" != "$HEAD_SHA" ] ||
                      ! git -C "$DIR" apply -R --check "$PATCH" 2>/dev/null; }; then
  git -C "$ROOT" worktree remove --force "$DIR"
fi
if [ ! -d "$DIR" ]; then
  mkdir -p "$(dirname "$DIR")"
  git -C "$ROOT" worktree add -f --detach "$DIR" HEAD >/dev/null
  # The patch adds migration 13: once the product has its own, renumber it.
  git -C "$DIR" apply "$PATCH" || { git -C "$ROOT" worktree remove --force "$DIR"; exit 1; }
fi
# The patched tree's run_relay_ab.sh builds it, and HEAD in its own
# build/ab-<sha>, then alternates their relay_bench runs.
(cd "$DIR" && bash bench/run_relay_ab.sh --base "$HEAD_SHA" --rounds "$ROUNDS" --rows "$ROWS" \
  --seconds "$SECS" --section batch_lease)
sed -n '/<!-- BEGIN batch_lease -->/,/<!-- END batch_lease -->/p' "$DIR/docs/benchmarks.md"
