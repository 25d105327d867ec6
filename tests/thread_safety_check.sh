#!/usr/bin/env bash
# The lock annotations are checked: clang (-Wthread-safety) accepts a guarded
# member written under its MutexLock and refuses one written without it. Both
# must hold, or the annotations are decoration (include/outbox/thread_annotations.h).
#   tests/thread_safety_check.sh SOURCE_DIR
set -euo pipefail
src="$(cd "${1:?source dir}" && pwd)"
command -v clang++ >/dev/null || { echo "clang++ not installed (scripts/deps installs it)"; exit 1; }
tmp="$(mktemp -d /tmp/outbox-tsa.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/good.cc" <<'CC'
#include "outbox/thread_annotations.h"
struct A {
  outbox::Mutex mu;
  int n OUTBOX_GUARDED_BY(mu) = 0;
  void Bump() { outbox::MutexLock l(mu); ++n; }
};
int main() { A a; a.Bump(); }
CC
sed 's/void Bump() { outbox::MutexLock l(mu); ++n; }/void Bump() { ++n; }/' "$tmp/good.cc" >"$tmp/bad.cc"
flags=(-std=c++20 -I"$src/include" -fsyntax-only -Wthread-safety -Werror=thread-safety)
clang++ "${flags[@]}" "$tmp/good.cc" || { echo "the annotated good case does not compile"; exit 1; }
if out="$(clang++ "${flags[@]}" "$tmp/bad.cc" 2>&1)"; then
  echo "clang accepted a guarded member written without its lock"; exit 1
fi
echo "$out" | grep -q "requires holding mutex" || { echo "unexpected error: $out"; exit 1; }
echo "thread-safety analysis ok"
