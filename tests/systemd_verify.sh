#!/usr/bin/env bash
# ctest systemd.unit_verifies.*: `systemd-analyze verify` accepts a shipped unit
# (packaging/systemd/*.service) without a single warning. Its ExecStart names
# /usr/bin/NAME, which verify requires to exist: a copy of the unit points at
# the built binary instead. Both daemons notify READY (Type=notify); the relay,
# which pings the watchdog, also sets WatchdogSec.
#   tests/systemd_verify.sh UNIT BINARY
set -euo pipefail
unit="${1:?unit}" bin="${2:?daemon binary}"
name="$(basename "$unit" .service)"
tmp="$(mktemp -d /tmp/outbox-unit.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
sed "s|/usr/bin/$name|$bin|" "$unit" >"$tmp/$name.service"
out="$(systemd-analyze verify "$tmp/$name.service" 2>&1)" || { echo "$out"; exit 1; }
if [ -n "$out" ]; then echo "systemd-analyze verify warned:"; echo "$out"; exit 1; fi
grep -q '^Type=notify$' "$unit" || { echo "$unit: not Type=notify"; exit 1; }
if [ "$name" = outbox-relay ]; then grep -q '^WatchdogSec=' "$unit" || { echo "$unit: no WatchdogSec"; exit 1; }; fi
echo "unit verifies"
