#!/usr/bin/env bash
# Function size follows concerns (STYLE.md 17): no function in src/ or tools/ is
# longer than 120 lines, none in the engines (src/relay, src/inbox) longer than 100.
# Known debt is listed, with its size today, in tests/function_sizes_allowed.txt;
# a listed function may shrink, never grow. Lengths come from universal-ctags
# (a function's first to last line; lambdas count in the function that holds them).
#   tests/function_sizes_test.sh SOURCE_DIR
set -euo pipefail
src="$(cd "${1:?source dir}" && pwd)"
command -v ctags >/dev/null || { echo "ctags not installed (scripts/deps installs universal-ctags)"; exit 1; }
cd "$src"
ctags -x --kinds-c++=f --fields=+ne --output-format=json -o - -R src tools 2>/dev/null | python3 -c '
import json, sys
allowed = {}
for line in open("tests/function_sizes_allowed.txt"):
    line = line.split("#", 1)[0].strip()
    if line:
        name, size = line.rsplit(None, 1)
        allowed[name] = int(size)
bad, seen = [], 0
for raw in sys.stdin:
    d = json.loads(raw)
    if d.get("kind") != "function" or "end" not in d:
        continue
    scope = d.get("scope", "")
    if d["name"].startswith("__anon"):
        continue  # a lambda: counted in the function that holds it
    seen += 1
    n = d["end"] - d["line"] + 1
    path = d["path"]
    limit = 100 if path.startswith(("src/relay/", "src/inbox/")) else 120
    # Anonymous namespaces in the scope are left out (ctags names them by a hash).
    scope = "::".join(p for p in scope.split("::") if p and not p.startswith("__anon"))
    name = path + ":" + (scope + "::" if scope else "") + d["name"]
    if n <= limit:
        continue
    if name in allowed and n <= allowed[name]:
        continue
    bad.append(f"{name}: {n} lines (limit {limit}" +
               (f", listed at {allowed[name]}" if name in allowed else "") + ")")
if seen < 100:
    sys.exit(f"ctags found only {seen} functions in src/ and tools/: is it universal-ctags?")
if bad:
    print("\n".join(bad))
    sys.exit(1)
print(f"function sizes ok ({seen} functions)")
'
