#!/usr/bin/env bash
# ctest package.deb: `cpack -G DEB` in BUILD_DIR makes the two Debian packages
# (cmake/OutboxPackage.cmake); dpkg -i installs them on this machine (apt-get
# -f fetches what they depend on, if anything is missing); then the system
# paths work: outbox-relay and outbox-consumer --version, the shipped
# /etc/outbox/relay.toml and consumer.toml load, the units verify, the `outbox` user exists, and a project finds the
# library with find_package(outbox) and no hints. Both packages are purged
# afterwards, which must leave no binary and no /etc/outbox behind.
#   tests/package_deb_test.sh BUILD_DIR SOURCE_DIR VERSION
set -euo pipefail
build="$(cd "${1:?build dir}" && pwd)" src="$(cd "${2:?source dir}" && pwd)" version="${3:?version}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo -n"; fi
if dpkg-query -W -f='${Status}' outbox 2>/dev/null | grep -q "install ok installed"; then
  echo "an outbox package is already installed on this machine; not touching it" >&2
  exit 1
fi
tmp="$(mktemp -d /tmp/outbox-deb-test.XXXXXX)"
cleanup() {
  $SUDO dpkg --purge outbox liboutbox-dev >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

(cd "$build" && cpack -G DEB -B "$tmp/pkg" >"$tmp/cpack.log" 2>&1) || { cat "$tmp/cpack.log"; exit 1; }
tools_deb="$(ls "$tmp"/pkg/outbox_*.deb)" dev_deb="$(ls "$tmp"/pkg/liboutbox-dev_*.deb)"
echo "built: $(basename "$tools_deb") $(basename "$dev_deb")"
echo "outbox Depends: $(dpkg-deb -f "$tools_deb" Depends)"
dpkg-deb -f "$tools_deb" Depends | grep -q 'librdkafka1' || { echo "the tools' Depends misses librdkafka1"; exit 1; }
dpkg-deb -f "$dev_deb" Depends | grep -q 'libpq-dev' || { echo "the dev package's Depends misses libpq-dev"; exit 1; }

if ! $SUDO dpkg -i "$tools_deb" "$dev_deb" >"$tmp/dpkg.log" 2>&1; then
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -f install -y -q >>"$tmp/dpkg.log" 2>&1 || \
    { cat "$tmp/dpkg.log"; exit 1; }
fi
got="$(/usr/bin/outbox-relay --version)"
[ "$got" = "outbox-relay $version" ] || { echo "outbox-relay --version: $got"; exit 1; }
[ "$(/usr/bin/outboxctl --version)" = "outboxctl $version" ]
getent passwd outbox >/dev/null || { echo "no outbox user"; exit 1; }
[ "$(stat -c '%U:%G %a' /etc/outbox/relay.toml)" = "root:outbox 640" ] || \
  { echo "/etc/outbox/relay.toml: $(stat -c '%U:%G %a' /etc/outbox/relay.toml)"; exit 1; }
# The shipped configuration loads (the database and broker come from the
# environment, as relay.env would give them).
OUTBOX_DATABASE_URL=postgresql://relay@db.invalid/orders OUTBOX_KAFKA_BOOTSTRAP=kafka.invalid:9092 \
  /usr/bin/outbox-relay --config /etc/outbox/relay.toml --print-config >"$tmp/config.txt"
grep -q '^workers = 4$' "$tmp/config.txt" || { echo "the shipped relay.toml did not load"; cat "$tmp/config.txt"; exit 1; }
[ "$(/usr/bin/outbox-consumer --version)" = "outbox-consumer $version" ]
[ "$(stat -c '%U:%G %a' /etc/outbox/consumer.toml)" = "root:outbox 640" ] || \
  { echo "/etc/outbox/consumer.toml: $(stat -c '%U:%G %a' /etc/outbox/consumer.toml)"; exit 1; }
# The shipped consumer.toml has no handler (its examples are comments): it
# refuses to start, saying so, and loads once one is given.
export OUTBOX_DATABASE_URL=postgresql://billing@db.invalid/billing OUTBOX_KAFKA_BOOTSTRAP=kafka.invalid:9092
rc=0; /usr/bin/outbox-consumer --config /etc/outbox/consumer.toml --print-config >"$tmp/consumer.txt" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q 'no \[\[handler\]\] configured' "$tmp/consumer.txt" || \
  { echo "the shipped consumer.toml without a handler: exit $rc"; cat "$tmp/consumer.txt"; exit 1; }
/usr/bin/outbox-consumer --config /etc/outbox/consumer.toml --print-config --set handler.0.topic=orders \
  --set handler.0.group=billing --set 'handler.0.sql=SELECT 1' >"$tmp/consumer.txt"
grep -q '^listen = "127.0.0.1:9465"$' "$tmp/consumer.txt" || { echo "the shipped consumer.toml did not load"; cat "$tmp/consumer.txt"; exit 1; }
unset OUTBOX_DATABASE_URL OUTBOX_KAFKA_BOOTSTRAP
if command -v systemd-analyze >/dev/null; then
  for unit in outbox-relay outbox-consumer; do
    out="$(systemd-analyze verify /usr/lib/systemd/system/$unit.service 2>&1)" || { echo "$out"; exit 1; }
    [ -z "$out" ] || { echo "systemd-analyze verify warned: $out"; exit 1; }
  done
fi
# Test machinery never ships: no fault-point header, no fault-point definition
# in the CMake package or the pkg-config file.
if dpkg-deb -c "$dev_deb" | grep -q 'fault\.h'; then echo "the dev package ships fault.h"; exit 1; fi
meta="$(dpkg -L liboutbox-dev | grep -E '\.(cmake|pc|h)$')"
[ -n "$meta" ] || { echo "dpkg -L liboutbox-dev lists no .cmake, .pc or .h file"; exit 1; }
if echo "$meta" | xargs grep -l 'OUTBOX_FAULT'; then
  echo "the installed files above mention OUTBOX_FAULT_POINTS"; exit 1
fi
test -f /usr/share/outbox/prometheus/outbox-alerts.yml
test -f /usr/share/outbox/grafana/outbox-dashboard.json
# find_package from the system paths, no CMAKE_PREFIX_PATH.
cmake -S "$src/tests/install/consumer" -B "$tmp/consumer" >"$tmp/consumer.log" 2>&1 || \
  { cat "$tmp/consumer.log"; exit 1; }
cmake --build "$tmp/consumer" >>"$tmp/consumer.log" 2>&1 || { cat "$tmp/consumer.log"; exit 1; }
"$tmp/consumer/consumer"

$SUDO dpkg --purge outbox liboutbox-dev >/dev/null
for f in /usr/bin/outbox-relay /usr/bin/outbox-consumer /usr/lib/cmake/outbox /etc/outbox \
  /usr/lib/systemd/system/outbox-relay.service /usr/lib/systemd/system/outbox-consumer.service; do
  [ ! -e "$f" ] || { echo "$f is left after purge"; exit 1; }
done
echo "package ok"
