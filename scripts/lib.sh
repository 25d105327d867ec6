# Sourced by scripts/demo, scripts/demo-lms and scripts/demo-saga.
#
#   run_step LABEL CMD...   runs CMD with its output kept aside. On a terminal a
#                           status line shows LABEL, the elapsed time and CMD's
#                           latest "[ NN%]" (cmake's build progress); elsewhere
#                           (CI logs, pipes) it prints "== LABEL" once. On
#                           failure CMD's last 40 lines go to stderr and the
#                           status is returned.
#   build_demo_preset       scripts/deps (in the foreground: sudo may ask), then
#                           the `demo` preset's configure and build, each as a
#                           step; sets BIN to the build tree.

run_step() {
  local label="$1"; shift
  local log rc=0 start=$SECONDS
  log="$(mktemp /tmp/outbox-step.XXXXXX)"
  if [ -t 1 ]; then
    "$@" >"$log" 2>&1 &
    local pid=$!
    while kill -0 "$pid" 2>/dev/null; do
      local pct
      pct="$(grep -oE '^\[ *[0-9]+%\]' "$log" 2>/dev/null | tail -1 || true)"
      printf '\r\033[K== %s %s %ds' "$label" "$pct" $((SECONDS - start))
      sleep 0.5
    done
    wait "$pid" || rc=$?
    printf '\r\033[K'
  else
    echo "== $label"
    "$@" >"$log" 2>&1 || rc=$?
  fi
  if [ "$rc" -ne 0 ]; then
    echo "== $label: FAILED (exit $rc); its last lines:" >&2
    tail -40 "$log" >&2
  elif [ -t 1 ]; then
    echo "== $label: done in $((SECONDS - start)) s"
  fi
  rm -f "$log"
  return "$rc"
}

build_demo_preset() {
  # Not a run_step: sudo may need to ask for a password on the terminal.
  "$ROOT/scripts/deps"
  run_step "configuring (demo preset: release with fault points)" cmake --preset demo
  run_step "building (demo preset)" cmake --build --preset demo -j"$(nproc)"
  BIN="$ROOT/build/demo"
}
