#!/usr/bin/env bash
# The shipped alert rules: promtool (Debian's prometheus package) checks them and
# runs their unit tests, and every runbook_url names a heading of docs/alerts.md.
#   tests/alert_rules_test.sh SOURCE_DIR
set -euo pipefail
SRC="$1"
PROMTOOL="${OUTBOX_PROMTOOL:-}"
if [ -z "$PROMTOOL" ]; then
  PROMTOOL="$(command -v promtool || true)"
  [ -n "$PROMTOOL" ] || PROMTOOL="$SRC/build/tools/prometheus/usr/bin/promtool"
fi
[ -x "$PROMTOOL" ] || { echo "promtool not found: run scripts/deps (or set OUTBOX_PROMTOOL)" >&2; exit 1; }
cd "$SRC/packaging/prometheus"
"$PROMTOOL" check rules outbox-alerts.yml
"$PROMTOOL" test rules outbox-alerts.test.yml

# A heading "## OutboxEventsNotLeaving" has the anchor "outboxeventsnotleaving".
anchors="$(grep -E '^#+ ' "$SRC/docs/alerts.md" | sed -E 's/^#+ //' | tr 'A-Z' 'a-z' | \
  sed -E 's/[^a-z0-9 -]//g; s/ /-/g')"
bad=0
while read -r url; do
  file="${url%%#*}" anchor="${url#*#}"
  if [ "$file" != "docs/alerts.md" ] || ! grep -qxF "$anchor" <<<"$anchors"; then
    echo "runbook_url $url: no such heading in docs/alerts.md" >&2
    bad=1
  fi
done < <(grep -oE 'runbook_url: "[^"]+"' outbox-alerts.yml | sed -E 's/runbook_url: "(.*)"/\1/')
alerts="$(grep -cE '^ *- alert: ' outbox-alerts.yml)"
urls="$(grep -cE 'runbook_url: ' outbox-alerts.yml)"
fors="$(grep -cE '^ *for: ' outbox-alerts.yml)"
if [ "$alerts" != "$urls" ] || [ "$alerts" != "$fors" ]; then
  echo "every alert needs a for: and a runbook_url ($alerts alerts, $fors for:, $urls runbook_url)" >&2
  bad=1
fi
[ "$bad" = 0 ] || exit 1
echo "alert rules ok ($alerts alerts)"
