#!/usr/bin/env bash
# ctest systemd.unit_verifies: `systemd-analyze verify` accepts the shipped unit
# (packaging/systemd/outbox-relay.service) without a single warning. Its
# ExecStart names /usr/bin/outbox-relay, which verify requires to exist: a copy
# of the unit points at the built binary instead.
set -euo pipefail
unit="${1:?unit}" relay="${2:?outbox-relay binary}"
tmp="$(mktemp -d /tmp/outbox-unit.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
sed "s|/usr/bin/outbox-relay|$relay|" "$unit" >"$tmp/outbox-relay.service"
out="$(systemd-analyze verify "$tmp/outbox-relay.service" 2>&1)" || { echo "$out"; exit 1; }
if [ -n "$out" ]; then echo "systemd-analyze verify warned:"; echo "$out"; exit 1; fi
grep -q '^Type=notify$' "$unit" && grep -q '^WatchdogSec=' "$unit"
echo "unit verifies"
