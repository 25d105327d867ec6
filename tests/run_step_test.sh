#!/usr/bin/env bash
# ctest scripts.run_step: the demo's set-up and build steps (scripts/lib.sh,
# run_step) show a live status line with cmake's "[ NN%]" on a terminal, print
# one line elsewhere, and show the command's last lines when it fails.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d /tmp/outbox-run-step.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/fake-build" <<'SH'
#!/usr/bin/env bash
for p in 10 45 99; do echo "[ $p%] Building CXX object x.o"; sleep 0.7; done
echo "[100%] Built target x"
SH
chmod +x "$tmp/fake-build"
cat >"$tmp/step.sh" <<SH
#!/usr/bin/env bash
set -euo pipefail
ROOT="$ROOT"
source "$ROOT/scripts/lib.sh"
run_step "building (fake)" "$tmp/fake-build"
if run_step "failing step" bash -c 'echo why it failed; exit 3'; then echo "no failure?"; fi
SH
chmod +x "$tmp/step.sh"
# A terminal (script(1), util-linux): the status line follows the build.
tty_out="$(script -qec "$tmp/step.sh" /dev/null)"
grep -q '== building (fake) \[ 45%\]' <<<"$tty_out" || { echo "no live [ 45%] line on a terminal:"; echo "$tty_out"; exit 1; }
grep -q '== building (fake): done in' <<<"$tty_out" || { echo "no done line:"; echo "$tty_out"; exit 1; }
# Not a terminal: one line per step, no escape sequences.
plain="$("$tmp/step.sh" 2>&1)"
[ "$(grep -c '== building (fake)' <<<"$plain")" = 1 ] || { echo "expected one line in a pipe:"; echo "$plain"; exit 1; }
if grep -q $'\033' <<<"$plain"; then echo "escape sequences in a pipe"; exit 1; fi
grep -q 'failing step: FAILED (exit 3)' <<<"$plain" && grep -q 'why it failed' <<<"$plain" || \
  { echo "a failure must show its exit status and output:"; echo "$plain"; exit 1; }
echo "run_step ok"
