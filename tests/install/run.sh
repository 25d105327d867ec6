#!/usr/bin/env bash
# Builds and runs tests/install/consumer/main.cc the three ways a service may
# use outbox (ctest install.*):
#   run.sh find_package BUILD_DIR   cmake --install BUILD_DIR into a temporary
#                                   prefix, then find_package(outbox) from there
#   run.sh pkg-config BUILD_DIR     the same prefix, compiled with pkg-config's flags
#   run.sh subdirectory SOURCE_DIR  add_subdirectory(SOURCE_DIR) in a new project
set -euo pipefail
mode="${1:?mode}" dir="$(cd "${2:?dir}" && pwd)"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tmp="$(mktemp -d /tmp/outbox-install-test.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
case "$mode" in
  find_package)
    cmake --install "$dir" --prefix "$tmp/prefix" >/dev/null
    cmake -S "$here/consumer" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
    cmake --build "$tmp/build" >/dev/null
    "$tmp/build/consumer"
    ;;
  pkg-config)
    cmake --install "$dir" --prefix "$tmp/prefix" >/dev/null
    export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
    echo "pkg-config: outbox $(pkg-config --modversion outbox)"
    # shellcheck disable=SC2046
    g++ -o "$tmp/consumer" "$here/consumer/main.cc" $(pkg-config --cflags --libs outbox)
    "$tmp/consumer"
    ;;
  subdirectory)
    cmake -S "$here/subdir" -B "$tmp/build" -DOUTBOX_SOURCE_DIR="$dir" >/dev/null
    cmake --build "$tmp/build" -j"$(nproc)" --target consumer >/dev/null
    "$tmp/build/consumer"
    ;;
  *) echo "usage: run.sh find_package|pkg-config BUILD_DIR | subdirectory SOURCE_DIR" >&2; exit 2 ;;
esac
